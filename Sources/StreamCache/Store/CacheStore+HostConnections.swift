#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

extension CacheStore {
    // What each origin host's refusals taught about its connections (``ConnectionAllowance``),
    // kept for the next process: a command-line tool run once per file, or an app started again,
    // otherwise learns a service's limit anew, one refused request or more each time.

    /// The hosts' allowances the index holds; none when it cannot be read (they are a hint). A
    /// row no StreamCache wrote (edited by hand, or damaged: a time or hold that is not a finite
    /// number of seconds within ``mostSeconds``, a count past ``ConnectionAllowance/mostConnections``) is left out:
    /// its times become `Duration`s, which trap on such a number, and its count is added to.
    func hostConnectionAllowances() -> [String: ConnectionAllowance.Snapshot] {
        let rows = try? database.readAndWait { db in
            try db.rows(#"SELECT "host", "connections", "refusedAt", "taughtAt", "holdSeconds" FROM "hostConnections""#) { row -> (String, ConnectionAllowance.Snapshot)? in
                let seconds = [row.double(2), row.double(3), row.double(4)]
                guard seconds.allSatisfy({ $0.isFinite && abs($0) < Self.mostSeconds }), row.int64(1) <= Int64(ConnectionAllowance.mostConnections) else { return nil }
                return (row.text(0), ConnectionAllowance.Snapshot(
                    connections: Int(row.int64(1)), refusedAt: Date(timeIntervalSince1970: seconds[0]),
                    taughtAt: Date(timeIntervalSince1970: seconds[1]), hold: .seconds(seconds[2])))
            }
        }
        return Dictionary((rows ?? []).compactMap { $0 }, uniquingKeysWith: { first, _ in first })
    }

    /// Ten thousand years: past any time or hold a process keeps.
    static let mostSeconds: Double = 3.2e11

    /// Replaces the hosts' allowances in the index with what `current` returns when the write
    /// runs: writes queued one after another each store the newest, whatever order their tasks
    /// ran in.
    func saveHostConnectionAllowances(_ current: @escaping @Sendable () -> [String: ConnectionAllowance.Snapshot]) async throws {
        try await writer().write { db in
            try db.execute(#"DELETE FROM "hostConnections""#)
            for (host, allowance) in current() {
                try db.execute(#"INSERT INTO "hostConnections" ("host", "connections", "refusedAt", "taughtAt", "holdSeconds") VALUES (?, ?, ?, ?, ?)"#,
                               [.text(host), .integer(Int64(allowance.connections)), .real(allowance.refusedAt.timeIntervalSince1970),
                                .real(allowance.taughtAt.timeIntervalSince1970), .real(allowance.hold.timeInterval)])
            }
        }
    }
}
