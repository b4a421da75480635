import Logging

extension Resource {
    // The complete cached bytes against the content digest the origin publishes
    // (``ResourceInfo/contentDigest``). Range requests carry no checksum of their own, and the
    // cache stitches a file from many of them, on several connections, over days: a byte flipped
    // on the way, a part written at the wrong offset, or two versions mixed would otherwise be
    // served as the file forever, offline included.

    /// How many bytes the check reads at a time.
    static var contentCheckChunkSize: Int { 1 << 20 }

    /// Starts hashing the data file once every byte of the resource is cached, when the origin
    /// published a digest the bytes have not yet been found to match. The hashing runs off the
    /// actor; reads and downloads go on meanwhile.
    func checkContentIfComplete(evenIfTurnedOff: Bool = false) {
        guard configuration.checksContentDigests || evenIfTurnedOff, !isShuttingDown, contentCheck == nil, let info, let expected = info.contentDigest, contentMatched != expected, disputedDigest != expected,
              let total = info.totalLength, available.contains(ByteRange(0, total)), let file else { return }
        let generation = self.generation
        logger.debug("checking the complete cached bytes against the origin's digest", metadata: ["key": "\(key)", "digest": "\(expected)"])
        contentCheck = Task.detached(priority: .utility) { [self] in
            let found = Result(catching: { try Self.digest(of: file, length: total, algorithm: expected.algorithm) })
            await self.finishContentCheck(expected: expected, found: found, generation: generation)
        }
    }

    /// The digest of the first `length` bytes of `file`.
    nonisolated static func digest(of file: DataFile, length: Int64, algorithm: ContentDigest.Algorithm) throws -> ContentDigest {
        var hasher = ContentHasher(algorithm)
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: contentCheckChunkSize, alignment: 16)
        defer { buffer.deallocate() }
        var offset: Int64 = 0
        while offset < length {
            try Task.checkCancellation()
            let count = Int(min(Int64(buffer.count), length - offset))
            let read = try file.read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[..<count]), at: offset)
            guard read == count else {
                throw StreamCacheError(.cacheIOFailed, "The cache file is shorter than its index claims; clear the cache entry.")
            }
            hasher.update(UnsafeRawBufferPointer(rebasing: buffer[..<count]))
            offset += Int64(count)
        }
        return hasher.finalize()
    }

    /// Acts on a check's result: a match is recorded in the index, so the bytes are not hashed
    /// again; a mismatch drops every cached byte, which the next read or prefetch fetches anew.
    /// The same wrong digest twice in a row means the origin serves those bytes as they are
    /// (its published digest is stale or wrong): they are kept, with an error event, rather than
    /// fetched without end.
    func finishContentCheck(expected: ContentDigest, found: Result<ContentDigest, any Error>, generation checkedGeneration: Int) {
        contentCheck = nil
        guard checkedGeneration == generation, info?.contentDigest == expected else {
            // Dropped or replaced while it was hashed: the bytes now cached get their own check.
            checkContentIfComplete()
            return
        }
        let digest: ContentDigest
        switch found {
        case .success(let value):
            digest = value
        case .failure(let error):
            if !(error is CancellationError) {
                logger.warning("could not read the cache file to check its digest", metadata: ["key": "\(key)", "error": "\(error)"])
            }
            return
        }
        if digest == expected {
            contentMatched = expected
            lastContentMismatch = nil
            logger.debug("the cached bytes match the origin's digest", metadata: ["key": "\(key)", "digest": "\(expected)"])
            recordContentCheck(expected, disputed: false)
            emit(.contentMatched(expected))
            return
        }
        let metadata: Logger.Metadata = ["key": "\(key)", "expected": "\(expected)", "found": "\(digest)"]
        if let last = lastContentMismatch, last.expected == expected, last.found == digest {
            disputedDigest = expected
            recordContentCheck(expected, disputed: true)
            logger.error("the origin served the same bytes twice, and they do not match the digest it publishes; keeping them", metadata: metadata)
            emit(.error(code: StreamCacheError.Code.contentMismatch.description,
                        message: "The origin's bytes do not match the digest it publishes (\(expected)), twice alike (\(digest)); they are kept."))
            return
        }
        lastContentMismatch = (expected, digest)
        contentDrops += 1
        logger.error("the cached bytes do not match the origin's digest; dropping them", metadata: metadata)
        emit(.contentMismatch(expected: expected, found: digest))
        guard let info else { return }
        do {
            try dropEveryCachedByte(info: info, failingWaitersWith: StreamCacheError(
                .contentMismatch, "The cached bytes did not match the origin's digest and were dropped; read again."))
        } catch {
            logger.warning("could not recreate the cache file after dropping its bytes", metadata: ["key": "\(key)", "error": "\(error)"])
        }
    }

    private func recordContentCheck(_ digest: ContentDigest, disputed: Bool) {
        let store = self.store
        enqueueStoreOperation {
            // A resource without a row yet has it recorded when the row is made (``createEntryIfNeeded()``).
            guard let id = await self.entryID else { return }
            try? await store.recordContentCheck(resourceID: id, digest: digest, disputed: disputed)
        }
    }

    /// Hashes the cached bytes and compares them with the digest the origin publishes, even when
    /// they matched before: bytes rotted on the disk since, or changed behind the cache's back,
    /// are found and dropped. What ``StreamCache/Configuration/checksContentDigests`` does once
    /// per file, asked for (`streamcache cache verify`); it runs with the setting off too.
    ///
    /// - Returns: What the check found; no request is made to the origin.
    /// - Throws: ``StreamCacheError`` (`cacheIOFailed`) when the cache cannot be read.
    public func checkContent() async throws -> ContentCheckResult {
        try await ensureLoaded()
        await contentCheck?.value
        guard let expected = info?.contentDigest else { return .noDigest }
        guard let total = info?.totalLength, available.contains(ByteRange(0, total)) else { return .incomplete }
        if disputedDigest == expected { return .disputed(expected) }
        let dropsBefore = contentDrops
        // Forgotten here only: a check that cannot read the file leaves the index's word as it was.
        contentMatched = nil
        checkContentIfComplete(evenIfTurnedOff: true)
        await contentCheck?.value
        if contentMatched == expected { return .matched(expected) }
        if contentDrops > dropsBefore, let mismatch = lastContentMismatch { return .mismatched(expected: mismatch.expected, found: mismatch.found) }
        if disputedDigest == expected { return .disputed(expected) }
        throw StreamCacheError(.cacheIOFailed, "The cache file of \(key) could not be read to check its digest.")
    }

    /// Waits for the check of the complete cached bytes, if one runs or is due (see
    /// ``contentDrops`` for whether it dropped them).
    func awaitContentCheck() async {
        checkContentIfComplete()
        await contentCheck?.value
    }
}
