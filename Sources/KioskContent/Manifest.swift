import Foundation

/// One hosted product of the manifest.
public struct ManifestEntry: Hashable, Sendable {
    /// The store's product id.
    public var productID: String
    /// The file, relative to the content directory.
    public var file: String
    /// The content version, e.g. "1.0"; a new version is a new download.
    public var version: String
    /// An optional display title.
    public var title: String
    /// The entitlement that opens it ("pro"), empty when none: then any receipt whose product grants that entitlement
    /// opens it, not only a receipt of ``productID``.
    public var entitlement: String = ""
    /// The file's resolved absolute path, checked to lie inside the content directory.
    public var resolvedPath: String
}

/// Why a manifest was refused.
public struct ManifestError: Error, Hashable, Sendable, CustomStringConvertible {
    /// What is wrong, naming the file, the product and the field.
    public var message: String
    public var description: String { message }
}

/// The content directory's `manifest.json`: which product is which file.
///
/// ```json
/// {
///   "products": [
///     { "product_id": "book.swift", "file": "books/swift.epub", "version": "1.0", "title": "The Swift Book" },
///     { "product_id": "pro.templates", "file": "pro/templates.zip", "version": "3", "entitlement": "pro" }
///   ]
/// }
/// ```
///
/// Nothing outside the manifest is ever served and product ids never become
/// paths. Files must be regular files inside the content directory; a path
/// with `..`, an absolute path, or a symlink that leads out of the directory
/// is refused when the manifest loads.
public struct Manifest: Sendable {
    /// The file name looked for in the content directory.
    public static let fileName = "manifest.json"

    /// The entries, in file order.
    public var entries: [ManifestEntry]
    private var byID: [String: ManifestEntry]

    /// The entry for `productID`, if hosted.
    public func entry(_ productID: String) -> ManifestEntry? { byID[productID] }

    init(entries: [ManifestEntry]) {
        self.entries = entries
        self.byID = Dictionary(entries.map { ($0.productID, $0) }, uniquingKeysWith: { first, _ in first })
    }

    private struct File: Decodable {
        struct Entry: Decodable {
            var productID: String?
            var file: String?
            var version: String?
            var title: String?
            var entitlement: String?

            enum CodingKeys: String, CodingKey {
                case productID = "product_id"
                case file, version, title, entitlement
            }
        }
        var products: [Entry]
    }

    /// Loads and checks `manifest.json` in `directory`.
    /// - Throws: ``ManifestError`` with a readable message.
    public static func load(contentDirectory directory: String) throws(ManifestError) -> Manifest {
        let manifestPath = (directory as NSString).appendingPathComponent(fileName)
        guard let root = realPath(directory) else {
            throw ManifestError(message: "content directory \(directory) does not exist")
        }
        guard let data = FileManager.default.contents(atPath: manifestPath) else {
            throw ManifestError(message: "\(manifestPath): cannot read the manifest")
        }
        let file: File
        do {
            file = try JSONDecoder().decode(File.self, from: data)
        } catch {
            throw ManifestError(
                message:
                    "\(manifestPath): not a manifest ({\"products\": [{\"product_id\", \"file\", \"version\", \"title\"}]}): \(error)"
            )
        }
        var entries: [ManifestEntry] = []
        var seen: Set<String> = []
        for (index, entry) in file.products.enumerated() {
            func fail(_ field: String, _ problem: String) -> ManifestError {
                ManifestError(
                    message:
                        "\(manifestPath): product \(entry.productID.map { "\"\($0)\"" } ?? "#\(index + 1)"), field \"\(field)\": \(problem)"
                )
            }
            guard let id = entry.productID, !id.isEmpty, id.count <= 128,
                id.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "._-".contains($0)) })
            else {
                throw fail("product_id", "is required: ASCII letters, digits, '.', '_' and '-'")
            }
            guard seen.insert(id).inserted else { throw fail("product_id", "appears twice") }
            guard let version = entry.version, !version.isEmpty else {
                throw fail("version", "is required, e.g. \"1.0\"")
            }
            guard let relative = entry.file, !relative.isEmpty else { throw fail("file", "is required") }
            guard !relative.hasPrefix("/"), !relative.split(separator: "/").contains("..") else {
                throw fail("file", "must be a path inside the content directory, without '..'")
            }
            let joined = (root as NSString).appendingPathComponent(relative)
            guard let resolved = realPath(joined) else { throw fail("file", "\(relative) does not exist") }
            guard resolved.hasPrefix(root.hasSuffix("/") ? root : root + "/") else {
                throw fail("file", "\(relative) leads outside the content directory (through a symlink)")
            }
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: resolved, isDirectory: &isDirectory), !isDirectory.boolValue,
                FileManager.default.isReadableFile(atPath: resolved)
            else {
                throw fail("file", "\(relative) is not a readable regular file")
            }
            if let entitlement = entry.entitlement {
                guard !entitlement.isEmpty, entitlement.count <= 64,
                    entitlement.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "._-".contains($0)) })
                else {
                    throw fail(
                        "entitlement", "must be a catalog entitlement id: ASCII letters, digits, '.', '_' and '-'")
                }
            }
            var manifestEntry = ManifestEntry(
                productID: id, file: relative, version: version, title: entry.title ?? "", resolvedPath: resolved)
            manifestEntry.entitlement = entry.entitlement ?? ""
            entries.append(manifestEntry)
        }
        return Manifest(entries: entries)
    }

    private static func realPath(_ path: String) -> String? {
        guard let resolved = realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
    }
}
