import Dispatch

/// An SQLite database file in WAL mode with a serialized writer and a separate reader.
///
/// Each connection lives on its own serial queue, and every access runs there: writes run one at
/// a time and in order, and reads never wait behind a write, not even behind the `fdatasync` that
/// ``CacheStore`` runs on the writer's queue before it records spans. (WAL lets one reader see a
/// consistent snapshot while a writer appends.) Blocking calls stay off Swift's cooperative
/// pool: an `async` access suspends its task until the queue has run it.
package final class SQLiteDatabase: @unchecked Sendable {
    // @unchecked: each connection is only touched on its queue.
    private let writer: SQLiteConnection
    private let writerQueue: DispatchQueue
    private let reader: SQLiteConnection
    private let readerQueue: DispatchQueue

    /// Opens (creating if needed) the database at `path`, switches it to WAL mode and runs
    /// `prepare` on the writer (schema migration), in the caller's thread.
    package init(path: String, label: String, prepare: (SQLiteConnection) throws -> Void) throws {
        writer = try SQLiteConnection(path: path)
        try writer.executeScript("PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;")
        try prepare(writer)
        reader = try SQLiteConnection(path: path)
        try reader.executeScript("PRAGMA query_only = ON;")
        writerQueue = DispatchQueue(label: "\(label).writer")
        readerQueue = DispatchQueue(label: "\(label).reader")
    }

    /// Runs `body` in a write transaction, after every write submitted before it.
    package func write<Value: Sendable>(_ body: @escaping @Sendable (SQLiteConnection) throws -> Value) async throws -> Value {
        try await writeWithoutTransaction { connection in
            try connection.transaction(immediate: true) { try body(connection) }
        }
    }

    /// Runs `body` on the writer outside any transaction (for work that must precede one, such as
    /// syncing a data file).
    package func writeWithoutTransaction<Value: Sendable>(_ body: @escaping @Sendable (SQLiteConnection) throws -> Value) async throws -> Value {
        try await run(on: writerQueue) { try body(self.writer) }
    }

    /// Runs `body` in a read transaction: every query in it sees the same snapshot.
    package func read<Value: Sendable>(_ body: @escaping @Sendable (SQLiteConnection) throws -> Value) async throws -> Value {
        try await run(on: readerQueue) {
            try self.reader.transaction(immediate: false) { try body(self.reader) }
        }
    }

    /// Runs `body` in a read transaction and waits for it, blocking the calling thread (for set-up
    /// code that is not `async`). It takes no write lock, so another process's writer goes on.
    package func readAndWait<Value>(_ body: (SQLiteConnection) throws -> Value) throws -> Value {
        try readerQueue.sync { try reader.transaction(immediate: false) { try body(reader) } }
    }

    /// Runs `body` in a write transaction and waits for it, blocking the calling thread (for set-up
    /// code that is not `async`).
    package func writeAndWait<Value>(_ body: (SQLiteConnection) throws -> Value) throws -> Value {
        try writerQueue.sync { try writer.transaction(immediate: true) { try body(writer) } }
    }

    private func run<Value: Sendable>(on queue: DispatchQueue, _ body: @escaping @Sendable () throws -> Value) async throws -> Value {
        try await withCheckedThrowingContinuation { continuation in
            queue.async { continuation.resume(with: Result { try body() }) }
        }
    }
}
