import Foundation

/// The files under `paths` (each a file or a directory, searched recursively;
/// hidden files and README.md skipped), sorted.
public func corpusFiles(_ paths: [String]) throws -> [String] {
    var files: [String] = []
    let manager = FileManager.default
    for path in paths {
        var isDirectory: ObjCBool = false
        guard manager.fileExists(atPath: path, isDirectory: &isDirectory) else {
            throw CocoaError(.fileNoSuchFile, userInfo: [NSFilePathErrorKey: path])
        }
        guard isDirectory.boolValue else {
            files.append(path)
            continue
        }
        let root = URL(fileURLWithPath: path)
        for relative in try manager.subpathsOfDirectory(atPath: path).sorted() {
            let name = (relative as NSString).lastPathComponent
            if name.hasPrefix(".") || name == "README.md" { continue }
            let file = root.appendingPathComponent(relative).path
            var isSubdirectory: ObjCBool = false
            if manager.fileExists(atPath: file, isDirectory: &isSubdirectory), !isSubdirectory.boolValue {
                files.append(file)
            }
        }
    }
    return files
}

/// Runs every file under `paths` through ``fuzzOne(_:)-([UInt8])``; returns how many ran.
@discardableResult
public func replay(_ paths: [String], before: (String) -> Void = { _ in }) throws -> Int {
    let files = try corpusFiles(paths)
    for file in files {
        before(file)
        let data = try Data(contentsOf: URL(fileURLWithPath: file))
        fuzzOne([UInt8](data))
    }
    return files.count
}
