import Foundation
import StreamCacheTestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// What the tests of offline play rely on: a test server that was stopped refuses connections,
/// and keeps its port from every other server while it lives. A port it released could go to the
/// next server another test starts, whose 404 would stand in for a refused connection.
@Suite struct StoppedServerPortTests {
    /// Whether a bind to `port` succeeds now (the socket is closed again at once).
    static func canBind(_ port: Int, reusingAddress: Bool) -> Bool {
        guard let fd = FreePort.boundSocket(port: port, reusingAddress: reusingAddress) else { return false }
        close(fd)
        return true
    }

    @Test func aStoppedTestOriginRefusesConnectionsAndKeepsItsPort() throws {
        let origin = try TestOrigin()
        close(try RawHTTP.connectedSocket(port: origin.port, timeout: 2))
        origin.stop()
        #expect(throws: POSIXError.self) { close(try RawHTTP.connectedSocket(port: origin.port, timeout: 2)) }
        #expect(!Self.canBind(origin.port, reusingAddress: false))
        #expect(!Self.canBind(origin.port, reusingAddress: true))
    }

    @Test func anOriginThatIsNotListeningYetRefusesConnectionsAndKeepsItsPort() throws {
        let origin = try TestOrigin(listening: false)
        #expect(throws: POSIXError.self) { close(try RawHTTP.connectedSocket(port: origin.port, timeout: 2)) }
        #expect(!Self.canBind(origin.port, reusingAddress: false))
        try origin.startListening()
        close(try RawHTTP.connectedSocket(port: origin.port, timeout: 2))
        origin.stop()
    }

    @Test func aStoppedNginxRefusesConnectionsAndKeepsItsPort() async throws {
        try await withTemporaryDirectory { root in
            let nginx = try await Nginx.start(root: root)
            close(try RawHTTP.connectedSocket(port: nginx.port, timeout: 2))
            await nginx.stop()
            #expect(throws: POSIXError.self) { close(try RawHTTP.connectedSocket(port: nginx.port, timeout: 2)) }
            #expect(!Self.canBind(nginx.port, reusingAddress: false))
            #expect(!Self.canBind(nginx.port, reusingAddress: true))
        }
    }
}
