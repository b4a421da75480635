extension ContentDigest {
    /// The digest of the whole representation an HTTP response carries, in a 206 as in a 200:
    /// RFC 9530's `Repr-Digest` (`sha-256=:…:`, `sha-512=:…:`), else RFC 3230's `Digest`
    /// (`SHA-256=…`, `MD5=…`), which digests the whole instance as well, else the `OC-Checksum`
    /// that ownCloud, Nextcloud and oCIS send with downloads (`SHA1:…`, several separated by
    /// spaces; the whole file's in a range response too, by their protocol). `Content-Digest` is
    /// not read: it covers only the part a range response sends.
    ///
    /// - Returns: The digest the headers carry of an algorithm the cache computes (SHA-256 first,
    ///   then SHA-512, SHA-1, MD5), or `nil` when they carry none.
    public init?(representationDigestHeaders headers: HTTPHeaders) {
        // SHA-256 before SHA-512: as good at telling corruption, and three times as fast where
        // the CPU has SHA extensions (`streamcache-bench digest`).
        let preference: [Algorithm] = [.sha256, .sha512, .sha1, .md5]
        var found: [ContentDigest] = []
        if let value = headers["Repr-Digest"] {
            // A structured-field dictionary whose values are byte sequences, `:base64:`.
            for member in value.split(separator: ",") {
                let (name, rest) = Self.nameAndValue(member)
                guard let algorithm = Self.algorithm(named: name) else { continue }
                let value = rest.split(separator: ";").first.map { $0.trimmingWhitespace() } ?? ""
                guard value.count >= 2, value.hasPrefix(":"), value.hasSuffix(":") else { continue }
                if let digest = ContentDigest(algorithm: algorithm, base64: String(value.dropFirst().dropLast())) { found.append(digest) }
            }
        }
        if found.isEmpty, let value = headers["Digest"] {
            for member in value.split(separator: ",") {
                let (name, rest) = Self.nameAndValue(member)
                guard let algorithm = Self.algorithm(named: name),
                      let digest = ContentDigest(algorithm: algorithm, base64: rest.trimmingWhitespace()) else { continue }
                found.append(digest)
            }
        }
        if found.isEmpty, let value = headers["OC-Checksum"] {
            for member in value.split(whereSeparator: { $0 == " " || $0 == "," }) {
                guard let colon = member.firstIndex(of: ":"),
                      let algorithm = Self.algorithm(ownCloudName: member[..<colon].lowercased()),
                      let digest = ContentDigest(algorithm: algorithm, hex: String(member[member.index(after: colon)...])) else { continue }
                found.append(digest)
            }
        }
        guard let best = preference.lazy.compactMap({ algorithm in found.first { $0.algorithm == algorithm } }).first else { return nil }
        self = best
    }

    private static func nameAndValue(_ member: Substring) -> (String, String) {
        guard let equals = member.firstIndex(of: "=") else { return (member.trimmingWhitespace().lowercased(), "") }
        return (member[..<equals].trimmingWhitespace().lowercased(), String(member[member.index(after: equals)...]))
    }

    private static func algorithm(ownCloudName name: String) -> Algorithm? {
        switch name {
        case "sha512": .sha512
        case "sha256": .sha256
        case "sha1": .sha1
        case "md5": .md5
        default: nil
        }
    }

    private static func algorithm(named name: String) -> Algorithm? {
        switch name {
        case "sha-512": .sha512
        case "sha-256": .sha256
        case "sha": .sha1
        case "md5": .md5
        default: nil
        }
    }
}
