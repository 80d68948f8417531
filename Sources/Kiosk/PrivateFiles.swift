import Foundation
import NIOConcurrencyHelpers

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The SDK's files on disk (payment journal, receipts, downloads), private to
/// the user who runs the app: directories are 0700 and files 0600 from the
/// moment they exist — created with that mode, so there is never a moment when
/// others could read them, and set exactly, so the umask cannot change it — and
/// every rename or removal is followed by an fsync of the directory, so the
/// change survives a power loss.
enum PrivateFiles {
    /// The mode of the directories the SDK creates.
    static let directoryMode: mode_t = 0o700
    /// The mode of the files the SDK creates.
    static let fileMode: mode_t = 0o600

    /// A system call on a file that failed.
    struct Failure: Error, CustomStringConvertible {
        /// What was being done, e.g. "cannot create".
        var operation: String
        /// The file or directory.
        var path: String
        /// The `errno` of the call.
        var code: Int32

        var description: String { "\(operation) \(path): \(String(cString: strerror(code))) (errno \(code))" }
    }

    // MARK: Directories

    /// Creates the directory at `path` with mode 0700 (its missing parents are
    /// created as `mkdir -p` does: they are not the SDK's). An existing directory
    /// is left as it is, unless `tighteningExisting`: then the permissions of its
    /// group and others are removed.
    ///
    /// - Returns: The former permissions of an existing directory that was tightened, else nil.
    @discardableResult
    static func makeDirectory(_ path: String, tighteningExisting: Bool) throws -> mode_t? {
        var info = stat()
        if stat(path, &info) != 0 {
            guard errno == ENOENT else { throw Failure(operation: "cannot look at", path: path, code: errno) }
            let parent = parentDirectory(of: path)
            try FileManager.default.createDirectory(atPath: parent, withIntermediateDirectories: true)
            if mkdir(path, directoryMode) == 0 {
                // Exactly 0700, whatever the umask.
                guard chmod(path, directoryMode) == 0 else {
                    throw Failure(operation: "cannot set the mode of", path: path, code: errno)
                }
                try syncDirectory(parent)
                return nil
            }
            guard errno == EEXIST else { throw Failure(operation: "cannot create", path: path, code: errno) }
            // Made meanwhile by someone else: look at it as at any existing one.
            guard stat(path, &info) == 0 else { throw Failure(operation: "cannot look at", path: path, code: errno) }
        }
        guard info.st_mode & 0o170000 == 0o040000 else {
            throw Failure(operation: "cannot use as a directory", path: path, code: ENOTDIR)
        }
        let permissions = info.st_mode & 0o7777
        guard tighteningExisting, permissions & 0o077 != 0 else { return nil }
        guard chmod(path, permissions & 0o700) == 0 else {
            throw Failure(operation: "cannot make private", path: path, code: errno)
        }
        return permissions
    }

    /// Flushes the directory at `path` (its list of names) to disk, so a file
    /// created, renamed or removed in it stays so after a power loss. A file
    /// system that cannot flush a directory (`EINVAL`) is not an error.
    static func syncDirectory(_ path: String) throws {
        let descriptor = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard descriptor >= 0 else { throw Failure(operation: "cannot open the directory", path: path, code: errno) }
        defer { close(descriptor) }
        guard fsync(descriptor) == 0 || errno == EINVAL else {
            throw Failure(operation: "cannot fsync the directory", path: path, code: errno)
        }
        directorySynced(path)
    }

    // MARK: Files

    /// Writes `data` to `path` atomically: to a new temporary file beside it
    /// (created 0600), fsynced, renamed over `path`, and the directory fsynced.
    /// After a crash the file holds either its old bytes or all of the new ones.
    ///
    /// - Throws: ``Failure``. When the rename happened and only the directory's
    ///   fsync failed, `path` already holds the new bytes.
    static func writeAtomically(_ data: Data, to path: String) throws {
        let temporary = "\(path).\(String(UInt64.random(in: 0...UInt64.max), radix: 36)).tmp"
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, fileMode)
        guard descriptor >= 0 else { throw Failure(operation: "cannot create", path: temporary, code: errno) }
        do {
            guard fchmod(descriptor, fileMode) == 0 else {
                throw Failure(operation: "cannot set the mode of", path: temporary, code: errno)
            }
            try writeAll(data, to: descriptor, path: temporary)
            guard fsync(descriptor) == 0 else { throw Failure(operation: "cannot fsync", path: temporary, code: errno) }
            close(descriptor)
        } catch {
            close(descriptor)
            unlink(temporary)
            throw error
        }
        guard renameFile(temporary, path) == 0 else {
            let code = errno
            unlink(temporary)
            throw Failure(operation: "cannot rename \(temporary) to", path: path, code: code)
        }
        try syncDirectory(parentDirectory(of: path))
    }

    /// Opens the file at `path` for writing, creating it 0600 when it is missing
    /// (and making an existing one 0600). Nothing is truncated.
    static func openForWriting(_ path: String) throws -> FileHandle {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, fileMode)
        guard descriptor >= 0 else { throw Failure(operation: "cannot open", path: path, code: errno) }
        guard fchmod(descriptor, fileMode) == 0 else {
            let code = errno
            close(descriptor)
            throw Failure(operation: "cannot set the mode of", path: path, code: code)
        }
        return FileHandle(fileDescriptor: descriptor, closeOnDealloc: true)
    }

    /// Renames `source` to `destination` (replacing it), then fsyncs the
    /// directories involved.
    static func rename(_ source: String, to destination: String) throws {
        guard renameFile(source, destination) == 0 else {
            throw Failure(operation: "cannot rename \(source) to", path: destination, code: errno)
        }
        let from = parentDirectory(of: source)
        let to = parentDirectory(of: destination)
        try syncDirectory(to)
        if from != to { try syncDirectory(from) }
    }

    /// Removes the file at `path`, then fsyncs its directory.
    /// - Returns: False when there was no such file (nothing changed).
    @discardableResult
    static func remove(_ path: String) throws -> Bool {
        guard unlink(path) == 0 else {
            if errno == ENOENT { return false }
            throw Failure(operation: "cannot remove", path: path, code: errno)
        }
        try syncDirectory(parentDirectory(of: path))
        return true
    }

    // MARK: Helpers

    private static func writeAll(_ data: Data, to descriptor: Int32, path: String) throws {
        try data.withUnsafeBytes { (buffer: UnsafeRawBufferPointer) in
            guard let base = buffer.baseAddress else { return }
            var done = 0
            while done < buffer.count {
                let count = write(descriptor, base + done, buffer.count - done)
                if count < 0 {
                    if errno == EINTR { continue }
                    throw Failure(operation: "cannot write", path: path, code: errno)
                }
                done += count
            }
        }
    }

    private static func renameFile(_ source: String, _ destination: String) -> Int32 {
        #if canImport(Glibc)
        Glibc.rename(source, destination)
        #else
        Darwin.rename(source, destination)
        #endif
    }

    /// The directory holding `path` ("." for a bare name).
    static func parentDirectory(of path: String) -> String {
        let parent = (path as NSString).deletingLastPathComponent
        return parent.isEmpty ? "." : parent
    }

    // MARK: Observing (tests)

    private static let observers = NIOLockedValueBox<[UInt64: @Sendable (String) -> Void]>([:])
    private static let nextObserver = NIOLockedValueBox<UInt64>(0)

    /// Runs `body` with `observer` called with the path of every directory
    /// fsynced (by any task: filter by path), right after the fsync.
    static func observingDirectorySyncs<Result>(
        _ observer: @escaping @Sendable (String) -> Void, _ body: () async throws -> Result
    ) async rethrows -> Result {
        let id = nextObserver.withLockedValue { next in
            defer { next += 1 }
            return next
        }
        observers.withLockedValue { $0[id] = observer }
        defer { observers.withLockedValue { _ = $0.removeValue(forKey: id) } }
        return try await body()
    }

    private static func directorySynced(_ path: String) {
        let current = observers.withLockedValue { Array($0.values) }
        for observer in current { observer(path) }
    }
}
