extension Resource {
    // Cached bytes the data file no longer holds: a file cut short or deleted behind the cache's
    // back while it runs (another program, a hand in the cache directory). What the cache finds
    // when it opens is reconciled there (``CacheStore``); this is the same while it runs, for the
    // bytes a read is about to be handed and for a file found gone when it is opened.

    /// The stretch of `run` (cached bytes, of which a read is about to be handed `cut`) that
    /// `file` no longer holds, if `cut` reaches into one; `nil` when `file` holds all of `cut`.
    ///
    /// Past the file's end (a file cut short), the loss runs from there to the end of `run`. A
    /// hole inside the file means it was cut and then written past the cut (a download went on):
    /// the loss then reaches a block beyond each edge of the hole, since the block the file was
    /// cut in and the block the later write began in read as data, zeros where nobody wrote.
    func bytesTheFileLost(in cut: ByteRange, of run: ByteRange, file: DataFile) -> ByteRange? {
        let held = file.heldBytes(from: cut.lowerBound)
        guard held.upperBound < cut.upperBound else { return nil }
        let size = (try? file.size()) ?? held.upperBound
        if held.upperBound >= size {
            return ByteRange(max(run.lowerBound, size), run.upperBound)
        }
        let block = file.blockSize()
        let resumes = file.nextHeldByte(atOrAfter: held.upperBound) ?? run.upperBound
        return ByteRange(max(run.lowerBound, held.upperBound - block), min(run.upperBound, max(resumes, held.upperBound) + block))
    }

    /// Forgets every cached byte when the data file was created anew on opening: the index named
    /// a file that is gone.
    func forgetEverythingIfTheFileWasGone(_ file: DataFile) {
        guard file.wasCreated, !available.isEmpty else { return }
        forgetBytesTheFileLost(ByteRange(0, Int64.max))
    }

    /// Forgets cached bytes the data file lost, here and in the index, so that the read that
    /// met the loss fetches them again from the origin. A hole in a sparse file reads as zeros,
    /// which must never be served as the resource's bytes; before, a read past a cut file's end
    /// failed with "the cache file is shorter than its index claims", and kept failing until the
    /// user cleared the entry by hand.
    ///
    /// - Returns: Whether any cached byte was forgotten.
    @discardableResult
    func forgetBytesTheFileLost(_ lost: ByteRange) -> Bool {
        let count = available.intersection(lost).coveredByteCount
        guard count > 0 else { return false }
        logger.warning("the cache file lost bytes its index claimed (cut or deleted outside the cache); fetching them again",
                       metadata: ["key": "\(key)", "start": "\(lost.lowerBound)", "end": "\(lost.upperBound)", "bytes": "\(count)"])
        available.remove(lost)
        let store = self.store
        enqueueStoreOperation {
            // A resource without an index row yet has committed nothing to forget.
            guard let id = await self.entryID else { return }
            try? await store.forget(lost, resourceID: id)
        }
        return true
    }
}
