#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

extension URL {
    /// The scheme, host and port, lowercased, as `scheme://host:port`: what a transport's
    /// connections and a server's habits are kept by (the port is empty when the URL names none).
    var hostKey: String {
        "\(scheme?.lowercased() ?? "")://\(host?.lowercased() ?? ""):\(port.map(String.init) ?? "")"
    }
}
