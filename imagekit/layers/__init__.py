"""Layer blobs to diffIDs: decompress a compressed stream and hash what comes out, streaming.

A layer's diffID is the sha256 of its *uncompressed* tar (OCI image-spec, config.md,
"rootfs.diff_ids"). Two copies of an image whose compressed blobs differ are the same content
exactly when every diffID is equal, so this package is what `imagekit mirror` rests on:
``diffid`` hashes a blob as it arrives, ``reader`` reads it as a stream for tar parsers;
``media`` says what a layer declares, ``inflate`` what its bytes are, ``stages`` the threads.

Facts it gets right, each with a unit test:

- A gzip layer may be several gzip members back to back (pigz and some registries write
  them); Python's zlib stops after the first member, the engine's Go reader does not. We loop
  over members; bytes after a member that are not another member are an error, as in Go's
  ``compress/gzip`` multistream reader.
- A zstd layer may be several frames, and skippable frames (magic 0x184D2A5?) may sit among
  them (RFC 8878, section 3.1.2). python-zstandard's decompressobj stops after one frame, and
  ``read_across_frames`` never reports a truncated last frame, so we loop over frames
  ourselves and require the last one to be complete. The window is bounded
  (``max_window_size``), so a frame cannot make us allocate gigabytes of history.
- The media type can lie. The bytes are sniffed by their magic; what happens when the media
  type and the bytes disagree is an explicit policy (:class:`MediaTypePolicy`).
- A decompression bomb is cut off once the uncompressed size passes a limit, and memory stays
  bounded long before that: gzip output is produced in bounded slices, zstd input is fed in
  slices small enough that even an all-RLE frame cannot expand one beyond a few hundred MiB.

The network read and the inflate+hash overlap: a reader thread pulls chunks from the blob
stream into a bounded queue while the calling thread decompresses and hashes. hashlib, isal
and zstandard release the GIL on large buffers, so layers verified in parallel threads use
several cores.
"""
