#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

extension Resource {
    /// Keeps up to ``StreamCache/Configuration/parallelDownloads`` downloads busy inside `wanted`,
    /// a long range some reader, prefetch or background fill still needs.
    ///
    /// Downloads own disjoint windows, so extra connections come from splitting windows, never
    /// from overlapping them: the download with the most bytes left past its request in flight
    /// keeps one part of them (an equal share of the bytes missing in `wanted`, at most
    /// ``StreamCache/Configuration/parallelPartSize``) and hands the rest to a new download.
    /// Repeated, this gives the reader's download the first part and each new connection the next
    /// one, with the last holding the tail; when a part is done, the tail is split again, and
    /// near the end each request asks for a share of what is left (``splitWorkShare()``), so all
    /// connections end together. A range no download covers (one stopped early) gets a download
    /// first.
    ///
    /// Nothing happens before the download at the start of `wanted` has answered, and received
    /// enough alone to tell the path's speed (``Download/hasMeasuredItsPath``; for how long at
    /// most, ``partsWaitForThePath(measuredBy:)``): the reader's first bytes never share
    /// the link with the parts after them, and the parts' own first bytes tell whether they add
    /// to that speed or take from it (``waitsForTheReadBeforeIt(_:)``). (Callers also wait until a
    /// reader streams: see ``partsServe(_:)``.) Nothing happens either while
    /// one connection is fast (``StreamCache/Configuration/parallelDownloadThroughputLimit``), nor
    /// once connections side by side were measured to fetch no faster than one
    /// (``StreamCache/Configuration/minimumParallelSpeedup``: a link they all share).
    func addParallelDownloads(in wanted: ByteRange, kind: Download.Kind, pacer: DownloadPacer? = nil) {
        var maximum = connectionsAllowed
        // Held to the background rate or a prefetch's own (`pacer`), connections beyond what it
        // has use for would each be held to a share of it, taking places a reader may want, and
        // asking for more requests. One connection's speed is the best either figure of it
        // tells: a whole request's counts its round trip, and one held to the rate counts nothing.
        if kind != .read {
            let speeds = [parallelGain.alone(), connectionThroughput].compactMap { $0 }
            for pacer in [backgroundPacer, pacer].compactMap({ $0 }) {
                if let useful = pacer.usefulConnections(atConnectionSpeed: speeds.max()) { maximum = min(maximum, useful) }
            }
        }
        guard splitsLongRanges, let total = info?.totalLength else { return }
        let wanted = wanted.clamped(toLength: total)
        if let head = downloadServingTheStart(of: wanted) {
            guard head.opened else { return }
            if let next = partsWaitForThePath(measuredBy: head) {
                replanOnceMeasured(by: next)
                return
            }
        }
        // Equal shares of what is missing, so the connections finish together; never more than
        // the part size, so the reader's connection stays close to the next one; never less than
        // one request. A donor that keeps more than its share (its request in flight is longer)
        // leaves the rest to be shared by the connections after it.
        var work = missingByteCount(in: wanted)
        var sharers = Int64(maximum)
        func share() -> Int64 { min(configuration.parallelPartSize, max(configuration.initialSegmentSize, work / max(1, sharers))) }
        // While nothing tells whether connections side by side gain, one part finds out first
        // (``measuringRequestLength``), beside the download before it; the others follow once it
        // has (its early sample plans the parts again), or never, on a link they would share. A
        // part left receiving alone (the download before it ended first: on a machine too busy
        // to take bytes in as they came, the first request's had all come before the part's
        // began) gets one beside it, or nothing would ever measure them together, and the read
        // went on one connection to its end.
        let measuring = measuringRequestLength
        // A measuring part whose sample waits for a late request to tell its bytes has measured:
        // another would only cost a request (``ParallelGain/holdsASample``).
        guard measuring == nil || !parallelGain.holdsASample else { return }
        for _ in 0..<maximum {
            let active = downloads.values.filter { $0.window.overlaps(wanted) }
            let measuringPartHasCompany = active.contains(where: \.isParallelPart) && active.count >= 2
            guard active.count < maximum, measuring == nil || !measuringPartHasCompany else { return }
            // A read starts splitting only when it is long; once split, it goes on splitting its
            // tail in smaller parts, so the last bytes do not trail on one connection. Only parts
            // tell that it was split: another reader's download inside the range (a player's
            // read of the index at the file's end) does not.
            guard active.contains(where: \.isParallelPart) || isLongEnoughToSplit(wanted, kind: kind) else { return }
            var covered = available
            for download in downloads.values where !download.window.isEmpty { covered.insert(download.window) }
            // A stretch nobody fetches, beyond the reader's own download, is taken first. When
            // requests can skip cached bytes, the download reaches past them to the next one (a
            // reader still in cached bytes has no download of its own yet: one per gap between a
            // player's seeks would cost a request each), and is split like any other.
            if let gap = covered.gaps(in: wanted).first(where: { $0.lowerBound > wanted.lowerBound }) {
                var limit = gap.upperBound
                if crossesCachedBytes {
                    let nextWindow = downloads.values.map(\.window).filter { !$0.isEmpty && $0.lowerBound >= gap.upperBound }.map(\.lowerBound).min()
                    limit = nextWindow ?? wanted.upperBound
                }
                startDownload(at: gap.lowerBound, limit: limit, kind: kind, continuesStream: true, firstRequestLength: measuring,
                              bulk: true, aheadOfItsReader: true)
                continue
            }
            // The donor keeps a part from where it is, or its request in flight when that is
            // longer (or when the part would end just past it: those few bytes would be a request
            // of their own); what it hands over must be worth a connection (a request at least).
            let part = share()
            func split(_ download: Download) -> Int64 {
                let kept = download.position + part
                return kept - download.segmentEnd < part / 4 ? download.segmentEnd : kept
            }
            func handover(_ download: Download) -> Int64 { min(download.limit, wanted.upperBound) - split(download) }
            guard let donor = active.max(by: { handover($0) < handover($1) }), handover(donor) > configuration.initialSegmentSize else { return }
            let split = split(donor)
            work -= missingByteCount(in: ByteRange(donor.position, max(donor.position, split)))
            sharers -= 1
            downloads[donor.id]?.limit = split
            // The new download's first request is its share, so what lies past it can be split
            // again; before any request of the resource has finished, it starts small like a
            // reader's (nothing tells yet how long a request takes, nor whether the reader stays)
            // unless parts were seen to gain (a part measured that; the reader streams), and
            // smaller still while the parts are to tell whether they gain at all.
            let firstRequest = measuring ?? (connectionThroughput == nil && !partsWereSeenToGain ? nil : min(share(), donor.limit - split))
            startDownload(at: split, limit: donor.limit, kind: kind, continuesStream: true, firstRequestLength: firstRequest, bulk: true,
                          aheadOfItsReader: true)
        }
    }

    /// The download that fetches the first byte of `wanted` the cache lacks, if any: the one the
    /// parts of `wanted` wait for (``partsWaitForThePath(measuredBy:)``).
    ///
    /// The first byte missing, not the first byte wanted: a reader stands where it was last
    /// handed bytes, and on a busy machine its task takes them in well after its download wrote
    /// them. Looked up at the reader's position, a download already past it was not found, and
    /// the parts began at once: under the whole test suite a cold prefetch's measuring part began
    /// 0.3 s into a first request on connections capped at 400 kB/s, whose sample of one
    /// connection alone then became a mix, so nothing told whether connections gain, and the
    /// prefetch went on two connections where four were expected.
    func downloadServingTheStart(of wanted: ByteRange) -> Download? {
        let firstMissing = available.range(containing: wanted.lowerBound)?.upperBound ?? wanted.lowerBound
        guard firstMissing < wanted.upperBound else { return nil }
        return downloads.values.first { $0.window.contains(firstMissing) }
    }

    /// The first request of the part that finds out whether connections side by side gain, while
    /// nothing tells (``connectionsGain(minimumSpeedup:now:)`` is `nil`: neither this resource
    /// nor another file of its host measured it lately): its early sample
    /// (``earlySampleBytes`` after its first chunk) and a little more. `nil` once known.
    ///
    /// On a link the connections share, whatever a part receives before the reader reaches it is
    /// taken from the reader, and a request in flight cannot be taken back: three parts of a cold
    /// read, a mebibyte each, held the reader's bytes back by 0.3 s on a 10 MB/s link (its first
    /// 5 MiB after 0.98 s, 0.67 s from the origin alone). One part with a short request takes
    /// little, and then waits for the reader before its next request
    /// (``waitsForTheReadBeforeIt(_:)``). Where connections gain, the other parts begin a sample
    /// later, and the measuring part costs a request.
    var measuringRequestLength: Int64? {
        guard let speedup = configuration.minimumParallelSpeedup, connectionsGain(minimumSpeedup: speedup) == nil else { return nil }
        return Self.earlySampleBytes * 3 / 2
    }

    /// Whether connections side by side were measured to gain (``ParallelGain``): a part that
    /// starts then asks for its share at once, as one does once a request's time is known.
    var partsWereSeenToGain: Bool {
        guard let speedup = configuration.minimumParallelSpeedup else { return false }
        return connectionsGain(minimumSpeedup: speedup) == true
    }

    /// Until when the parts of a long read wait for `head`, the download at its start, which has
    /// answered, to tell the path's speed (``Download/hasMeasuredItsPath``); `nil` when they need
    /// not wait.
    ///
    /// Until its body's bytes have come for ``longestWaitForASlowPath``, timed by when they
    /// arrived, and never past ``longestWaitForAStalledPath`` after its request left: a 256 KiB
    /// sample takes 65 ms at a cloud connection's 4 MB/s, 0.7 s at 400 kB/s. The parts used to
    /// wait 250 ms after the request left at most. On a slow path the part that measures whether
    /// connections gain then received beside the first request, whose sample was a mix and told
    /// nothing: with no figure of one connection alone, nothing showed that four gain, and a song
    /// prefetched on connections capped at 400 kB/s went on two of them until that request ended
    /// (`Benchmarks/prefetch-time.sh` on the `slowcloud` profile: 7.2 MB in 10.7–13.2 s, 18 s on
    /// one connection).
    ///
    /// Timed by arrival, and from the answer on, not by the clock alone: on a machine too busy to
    /// take bytes in as they come (the test suite's first seconds), the 250 ms ran out before the
    /// engine had taken in the answer's first chunk, or with one chunk taken in, and the part
    /// began before the sample that the bytes already there would have given.
    func partsWaitForThePath(measuredBy head: Download, at now: ContinuousClock.Instant = .now) -> ContinuousClock.Instant? {
        guard !head.hasMeasuredItsPath, let sentAt = head.requestSentAt else { return nil }
        let stalled = sentAt + Self.longestWaitForAStalledPath
        guard now < stalled else { return nil }
        // The first bytes, which begin the sample, give no sign of their own: look again.
        guard let sample = head.requestSample else { return min(stalled, now + .milliseconds(100)) }
        let received = sample.lastByteAt - sample.firstByteAt
        guard received < Self.longestWaitForASlowPath else { return nil }
        return min(stalled, now + max(.milliseconds(20), Self.longestWaitForASlowPath - received))
    }

    /// How long a long read's first request may receive before its parts begin, if it has not
    /// told the path's speed by then (``partsWaitForThePath(measuredBy:)``).
    static let longestWaitForASlowPath: Duration = .milliseconds(1500)

    /// The longest a long read's parts wait for its answered first request to tell the path's
    /// speed, from when it left (``partsWaitForThePath(measuredBy:)``): an answer whose bytes
    /// stop coming, or never come, tells nothing more.
    static let longestWaitForAStalledPath: Duration = .seconds(3)

    /// Plans the parts again at `deadline` (once), for a read whose first request may not have
    /// told the path's speed by then: it may not receive at all until a part is there.
    func replanOnceMeasured(by deadline: ContinuousClock.Instant) {
        guard replanOnceMeasured == nil else { return }
        replanOnceMeasured = Task { [weak self] in
            try? await Task.sleep(until: deadline)
            await self?.replanAfterWaitingForThePath()
        }
    }

    private func replanAfterWaitingForThePath() {
        replanOnceMeasured = nil
        replanParallelDownloads()
    }

    /// The bytes of `range` not cached yet.
    func missingByteCount(in range: ByteRange) -> Int64 {
        range.count - available.coveredByteCount(in: range)
    }

    /// The most a request of a split range asks for: an equal share, per connection the split
    /// may use, of what its downloads still have to fetch (the bytes missing in their windows,
    /// on the wire or not yet asked for), and never less than
    /// ``StreamCache/Configuration/initialSegmentSize``. `nil` while no range is split.
    ///
    /// A request in flight cannot be split, so one that took all that was left of the last part
    /// would fetch it alone while the other connections, done with theirs, stand idle: three
    /// connections read 30 MB at 8 MB/s, the last 7 MB on one connection. Asking for a share, the
    /// last requests of all connections end together, at the cost of a request or two each.
    func splitWorkShare() -> Int64? {
        guard splitsLongRanges, downloads.values.contains(where: \.isParallelPart) else { return nil }
        let connections = Int64(connectionsAllowed)
        let work = downloads.values.reduce(Int64(0)) { $0 + missingByteCount(in: $1.window) }
        return max(configuration.initialSegmentSize, (work + connections - 1) / connections)
    }

    /// The first request of a reader's download for `wanted`, a read long enough to be split
    /// across connections (see ``addParallelDownloads(in:kind:)``): an equal share of its missing
    /// bytes, as the parts after it will ask for. `nil` for a read that is not split.
    ///
    /// The parts begin once the reader's first request has answered. Asking for more, it would
    /// end last: a read across the islands a player's seeks left in a 30 MB file asked for
    /// 8 MiB, the three parts after it for 7.0 to 7.5 MB each.
    func firstShare(ofALongRead wanted: ByteRange) -> Int64? {
        guard splitsLongRanges, let total = info?.totalLength else { return nil }
        let wanted = wanted.clamped(toLength: total)
        guard isLongEnoughToSplit(wanted, kind: .read) else { return nil }
        return max(configuration.initialSegmentSize, missingByteCount(in: wanted) / Int64(connectionsAllowed))
    }

    /// Whether a read of `wanted` that is not split yet is long enough to be: more than two parts
    /// for a player's read (or a slow one, below), more than two first segments for a prefetch or
    /// a background fill.
    ///
    /// A prefetch wants every byte, so parts cost it requests and nothing else: a 7.2 MB song
    /// prefetched on the benchmark's `cloud` profile took 2.07 s on one connection, 0.87 s split
    /// (7 origin requests instead of 4). A player's read to the end may be a probe that leaves
    /// after its first kilobytes (`ffprobe` on an MP4 whose index is at the end), and whatever its
    /// parts have on the wire then is fetched for nothing: split from two first segments, such
    /// probes pulled 1.5 × the bytes on the `wan` profile (`ffprobe` 1.69 → 2.51 MB), so a
    /// player's read waits for two parts, or for two first segments that one connection takes
    /// long to bring (``takesLongOnOneConnection(_:)``). Not a short read, however slow the
    /// path: a reader's first request for a read long enough to split is a share of it
    /// (``firstShare(ofALongRead:)``), at least a first segment, and a 100 kB read after a
    /// request that a busy machine took in at a crawl asked for the 900 kB to the file's end.
    func isLongEnoughToSplit(_ wanted: ByteRange, kind: Download.Kind) -> Bool {
        switch kind {
        case .read: wanted.count > 2 * configuration.parallelPartSize
            || (wanted.count > 2 * configuration.initialSegmentSize && takesLongOnOneConnection(wanted))
        case .prefetch, .background: wanted.count > 2 * configuration.initialSegmentSize
        }
    }

    /// Whether the bytes missing in `wanted` take longer than
    /// ``StreamCache/Configuration/longReadDuration`` at the speed one connection alone was
    /// measured to reach (this resource's, else its host's); `false` while none was.
    ///
    /// Two parts (16 MiB) take 4 s at a cloud connection's 4 MB/s, and a player's probe has left
    /// long before. On a service that throttles each connection harder, a song is far shorter
    /// than that and still takes long: at 400 kB/s (the `slowcloud` profile) a 7.2 MB MP3 read
    /// whole by a player that fills its cache as fast as it can (mpv, `ffmpeg`, `curl`) came
    /// over one connection in 18 s. A probe that leaves after the split costs each part what it
    /// has on the wire, about a round trip's worth on such a link
    /// (``updateIdleState(_:)``).
    func takesLongOnOneConnection(_ wanted: ByteRange) -> Bool {
        guard let longest = configuration.longReadDuration else { return false }
        let measured = parallelGain.alone() ?? pathHost.flatMap { hostPaths.rates(of: $0).alone }
        guard let speed = measured, speed > 0 else { return false }
        return Double(missingByteCount(in: wanted)) / speed > longest.timeInterval
    }

    /// The most connections a download of this resource is split across:
    /// ``StreamCache/Configuration/parallelDownloads``, or fewer while the origin lately refused
    /// one more (this resource's or another file's of its host: ``ConnectionAllowance``).
    var connectionsAllowed: Int {
        min(configuration.parallelDownloads, connectionsAcceptedLately(byHost: pathHost) ?? .max)
    }

    /// A reader came to wait for download `id`: a download no reader waited for until now (a
    /// part of a long read, a prefetch that a player reached) goes past the gate at once
    /// (``BulkConnectionGate/admitNow(_:)``), and one that has gone through gives its place back.
    ///
    /// It is the reader's download from now on, on the connection the gate keeps for readers,
    /// which the reader's own download had been using: the place it held goes to the next part
    /// waiting. Before, on a service that accepts two connections (the gate then lets one
    /// download nobody waits for through), a long read's last part waited there until the other
    /// part's request ended, and ran alone: against nginx serving two at once, 6.2 s for a 31 MB
    /// file that two connections bring in 4.3 (`Benchmarks/limited-service.sh`).
    func readerCame(toDownload id: Int) {
        downloads[id]?.readerWaits = true
        guard let download = downloads[id], let ticket = download.gateTicket else { return }
        connectionGate.admitNow(ticket)
        guard download.passedGate else { return }
        connectionGate.leave(ticket)
        downloads[id]?.gateTicket = nil
    }

    /// The fewest connections the origin is taken to accept at once, by what it showed when it
    /// last refused one more of this resource's or of another file of `host`, and the probes
    /// since (``ConnectionAllowance``); `nil` when it refused none lately.
    func connectionsAcceptedLately(byHost host: String?, at now: ContinuousClock.Instant = .now) -> Int? {
        [connectionAllowance.connections(at: now), host.flatMap { hostPaths.allowedConnections(of: $0, at: now) }].compactMap { $0 }.min()
    }

    /// Whether long ranges of this resource are split across connections: more than one is
    /// allowed (``connectionsAllowed``), the origin serves ranges of a known length, one connection is slow
    /// (``StreamCache/Configuration/parallelDownloadThroughputLimit``) or not measured yet, and
    /// connections side by side were not seen to fetch no faster than one
    /// (``StreamCache/Configuration/minimumParallelSpeedup``).
    var splitsLongRanges: Bool {
        guard connectionsAllowed > 1, configuration.parallelPartSize > 0,
              info?.acceptsByteRanges == true, info?.totalLength != nil else { return false }
        if let ceiling = configuration.parallelDownloadThroughputLimit, let throughput = connectionThroughput, throughput >= ceiling {
            return false
        }
        return parallelConnectionsMayHelp
    }

    /// Whether `reader`'s range may be split across connections: a prefetch's always, a
    /// reader's once it streams (``readerStreams(streamed:readerEnd:)``), unless it plays in real
    /// time (``playbackWindow(of:)``: one connection keeps ahead of it). Parts started for a
    /// request the player drops at once would each cost a request and fetch bytes nobody asked
    /// for: on a cloud connection of 4 MB/s, three more requests of a mebibyte or more each.
    func partsServe(_ reader: ReaderState) -> Bool {
        reader.isPrefetch || (readerStreams(streamed: reader.position - reader.start, readerEnd: reader.end) && playbackWindow(of: reader) == nil)
    }

    /// Re-plans parallel downloads for everyone who still needs a long range: after a download
    /// answered (its reader's first bytes are in) or finished its part, and when the last reader
    /// left a resource that is filled in the background.
    func replanParallelDownloads() {
        guard configuration.parallelDownloads > 1 else { return }
        for reader in readers.values where partsServe(reader) {
            addParallelDownloads(in: ByteRange(reader.position, max(reader.position, reader.end)), kind: reader.isPrefetch ? .prefetch : .read,
                                 pacer: reader.pacer)
        }
        if readers.isEmpty, configuration.completesResourcesInBackground {
            // Filling the file for offline use: every download left is a fill.
            for download in downloads.values {
                addParallelDownloads(in: download.window, kind: .background)
            }
        }
    }
}
