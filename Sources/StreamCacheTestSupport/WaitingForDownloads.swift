import StreamCache

/// Waits until `resource` has no download in flight (its read-ahead ran out, or the origin was
/// left), checking every `interval`, for at most `limit` stretched by ``TestTiming/slowdown``.
///
/// Returns whether the downloads ended in time; a test that depends on it says so with `#expect`.
/// One helper keeps every such wait bounded in time, however slow the machine.
@discardableResult
public func waitUntilNoDownload(of resource: Resource, within limit: Duration,
                                checkingEvery interval: Duration = .milliseconds(25)) async throws -> Bool {
    let deadline = ContinuousClock.now + TestTiming.time(limit)
    while await resource.isDownloading {
        guard ContinuousClock.now < deadline else {
            print("downloads still under way after \(TestTiming.time(limit)):\n" + (await resource.downloadsDescription).joined(separator: "\n"))
            return false
        }
        try await Task.sleep(for: interval)
    }
    return true
}
