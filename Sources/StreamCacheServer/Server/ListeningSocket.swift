import NIOCore
import StreamCache
#if canImport(Glibc)
import Glibc
private let systemBind = Glibc.bind
private let systemClose = Glibc.close
#elseif canImport(Darwin)
import Darwin
private let systemBind = Darwin.bind
private let systemClose = Darwin.close
#endif

/// TCP sockets bound to one address and listening, one for each event loop that accepts.
///
/// Each socket has `SO_REUSEPORT` set, so that all of them bind the same port and the kernel
/// spreads new connections over them (by their addresses), each loop accepting on its own. One
/// socket watched by several loops would wake all of them for each connection, and SwiftNIO
/// expects a loop woken for a socket to find something to read there. Binding with
/// `SO_REUSEPORT` would let a second process with the same option (a second `serve` started on
/// the same port by mistake) take a share of the connections, so an ordinary bind of the port is
/// tried first, and a port in use fails with ``StreamCacheError`` saying so. Other systems than
/// Linux spread connections differently or not at all, and get one socket.
package struct ListeningSocket: Sendable {
    /// The descriptor, owned by whoever it is handed to (a server channel closes it).
    package let descriptor: CInt
    /// The port bound: the one asked for, or the one the system chose for port 0.
    package let port: Int

    /// Binds `count` sockets (one on systems other than Linux) to `host` (an address or a name)
    /// at `port` (0: a free one, the same for all) and listens on each.
    ///
    /// - Throws: ``StreamCacheError`` (`invalidArgument`) when the host does not resolve or the
    ///   port cannot be bound (in use, or not permitted).
    package static func bind(host: String, port: Int, count: Int, backlog: CInt = 256) throws -> [ListeningSocket] {
        let address: SocketAddress
        do {
            address = try SocketAddress.makeAddressResolvingHost(host, port: port)
        } catch {
            throw StreamCacheError(.invalidArgument, "Cannot listen on \(host): the address does not resolve (\(error)).")
        }
        #if os(Linux)
        let count = max(1, count)
        #else
        let count = 1
        #endif
        if count > 1, port != 0 {
            // The check that the port is free, described above; closed at once, never listening.
            try bound(address, host: host, sharing: false, listening: nil).close()
        }
        var sockets: [ListeningSocket] = []
        do {
            var address = address
            for _ in 0..<count {
                let socket = try bound(address, host: host, sharing: count > 1, listening: backlog)
                sockets.append(socket)
                address = try SocketAddress.makeAddressResolvingHost(host, port: socket.port)
            }
        } catch {
            sockets.forEach { $0.close() }
            throw error
        }
        return sockets
    }

    private static func bound(_ address: SocketAddress, host: String, sharing: Bool, listening backlog: CInt?) throws -> ListeningSocket {
        let port = address.port ?? 0
        #if canImport(Glibc)
        let descriptor = socket(address.protocol.rawValue, CInt(SOCK_STREAM.rawValue) | CInt(SOCK_CLOEXEC.rawValue), 0)
        #else
        let descriptor = socket(address.protocol.rawValue, SOCK_STREAM, 0)
        #endif
        guard descriptor >= 0 else { throw failure("socket", host: host, port: port) }
        func fail(_ call: String) -> StreamCacheError {
            let error = failure(call, host: host, port: port)
            _ = systemClose(descriptor)
            return error
        }
        var yes: CInt = 1
        // As every server: a port whose last connections linger in TIME_WAIT can be bound again.
        guard setsockopt(descriptor, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<CInt>.size)) == 0 else { throw fail("setsockopt") }
        #if os(Linux)
        if sharing, setsockopt(descriptor, SOL_SOCKET, CInt(SO_REUSEPORT), &yes, socklen_t(MemoryLayout<CInt>.size)) != 0 { throw fail("setsockopt") }
        #endif
        guard address.withSockAddr({ systemBind(descriptor, $0, socklen_t($1)) }) == 0 else { throw fail("bind") }
        if let backlog, listen(descriptor, backlog) != 0 { throw fail("listen") }
        var bound = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let named = withUnsafeMutablePointer(to: &bound) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
        }
        guard named == 0 else { throw fail("getsockname") }
        return ListeningSocket(descriptor: descriptor, port: Self.port(of: bound))
    }

    /// Closes the descriptor; for one that was never handed to a server channel.
    package func close() {
        _ = systemClose(descriptor)
    }

    private static func failure(_ call: String, host: String, port: Int) -> StreamCacheError {
        let code = errno
        let reason = String(cString: strerror(code))
        let hint = code == EADDRINUSE ? " (another program listens there; choose another --port, or 0 for a free one)" : ""
        return StreamCacheError(.invalidArgument, "Cannot listen on \(host) port \(port): \(call) failed: \(reason)\(hint).")
    }

    private static func port(of address: sockaddr_storage) -> Int {
        let family = CInt(address.ss_family)
        var address = address
        return withUnsafePointer(to: &address) { pointer in
            switch family {
            case AF_INET: pointer.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { Int(UInt16(bigEndian: $0.pointee.sin_port)) }
            case AF_INET6: pointer.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { Int(UInt16(bigEndian: $0.pointee.sin6_port)) }
            default: 0
            }
        }
    }
}
