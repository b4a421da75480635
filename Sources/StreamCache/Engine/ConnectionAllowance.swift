/// How many connections at once an origin host lately accepted from one file's downloads, as it showed by
/// refusing one more for now (HTTP 429, 503, or Google's 403 `rateLimitExceeded`).
///
/// Services limit a user's downloads at once, not only their speed: nginx's `limit_conn` answers
/// the connection past its limit with 503, a file host with 429. A read split across four
/// connections there used to fail whole: the origin refused the third and fourth parts, each
/// retried its five attempts against a limit that stayed, and a part the reader was waiting for
/// failed the read, while a player talking to the origin directly, one connection at a time,
/// played on. A part refused twice in a row now gives way instead (``OriginRequest/givesWayWhenBusy``),
/// its bytes left to the downloads that were accepted, and the resource and the other files of
/// its host (``HostPathMemory``) split across no more connections than were in use when it was
/// refused.
///
/// A refusal may also come from a service that was busy for a moment; it is forgotten after
/// ``memory``, and the next split finds out again, at the cost of a refused request or two.
struct ConnectionAllowance: Sendable {
    /// How long a refusal counts: a service's limit on a user's downloads stays as it is for far
    /// longer than one song, and finding it again costs a refused request each time.
    static let memory: Duration = .seconds(600)

    private var connections: Int?
    private var refusedAt: ContinuousClock.Instant?

    /// Records that the origin refused one more connection at `now` while `inUse` of this
    /// download's kind were open to it: from then on at most that many (one at least), or fewer if
    /// a refusal within ``memory`` said fewer.
    mutating func recordRefusal(whileUsing inUse: Int, at now: ContinuousClock.Instant = .now) {
        let allowed = max(1, inUse)
        connections = self.connections(at: now).map { min($0, allowed) } ?? allowed
        refusedAt = now
    }

    /// The connections the origin accepted when it last refused one more, within ``memory``
    /// before `now`; `nil` when it refused none in that time.
    func connections(at now: ContinuousClock.Instant = .now) -> Int? {
        guard let refusedAt, now - refusedAt < Self.memory else { return nil }
        return connections
    }
}
