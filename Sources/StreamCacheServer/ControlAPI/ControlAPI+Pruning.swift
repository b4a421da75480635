import StreamCache

// Apart from the models, as `ControlAPI+ContentCheck.swift` is: the fuzzing build compiles
// `ControlAPIModels.swift` without the engine's types.
extension ControlAPI.Pruning {
    /// What `evicted` reports.
    public init(_ evicted: [EvictedResource], dryRun: Bool) {
        self.init(evicted: evicted.map { Evicted(key: $0.key.rawValue, bytes: $0.bytes, reason: $0.reason.rawValue) }, dryRun: dryRun)
    }
}
