import StreamCache

// Apart from the models: the fuzzing build compiles `ControlAPIModels.swift` against the few
// model types its parsers need (Fuzz/Sources), which do not include the engine's.
extension ControlAPI.ContentCheck {
    /// Describes `result` for `key`.
    public init(key: CacheKey, result: ContentCheckResult) {
        switch result {
        case .matched(let digest): self.init(key: key.rawValue, result: "matched", expected: digest.description)
        case .mismatched(let expected, let found):
            self.init(key: key.rawValue, result: "mismatched", expected: expected.description, found: found.description)
        case .disputed(let digest): self.init(key: key.rawValue, result: "disputed", expected: digest.description)
        case .incomplete: self.init(key: key.rawValue, result: "incomplete")
        case .noDigest: self.init(key: key.rawValue, result: "noDigest")
        }
    }
}
