import Foundation

/// A local certificate authority and a server certificate signed by it, for
/// development and tests: `kiosk-store tls create-dev` writes them, services
/// serve the server pair, clients trust the CA. Made with the `openssl`
/// command (Debian's `openssl` package), P-256 keys, valid for 30 days.
///
/// Not for production: there, certificates come from the deployment's own CA
/// or a public one.
public struct DevelopmentCertificates: Sendable {
    /// The CA's certificate (PEM): the trust root clients are given.
    public var caCertificatePath: String
    /// The CA's private key (PEM, 0600).
    public var caKeyPath: String
    /// The server certificate (PEM), valid for `localhost`, 127.0.0.1, ::1 and the extra names asked for.
    public var serverCertificatePath: String
    /// The server certificate's private key (PEM, 0600).
    public var serverKeyPath: String

    /// The files' paths in `directory`, whether or not they exist yet.
    public init(directory: String) {
        func path(_ name: String) -> String { (directory as NSString).appendingPathComponent(name) }
        caCertificatePath = path("ca.pem")
        caKeyPath = path("ca-key.pem")
        serverCertificatePath = path("server.pem")
        serverKeyPath = path("server-key.pem")
    }

    /// Creates a CA (unless `directory` already holds one) and a new server
    /// certificate it signs, valid for `localhost`, 127.0.0.1, ::1 (unless
    /// `includingLoopback` is false) and `hosts`.
    /// - Throws: ``TransportSecurityError`` when `openssl` is missing or fails.
    @discardableResult
    public static func create(
        in directory: String, hosts: [String] = [], includingLoopback: Bool = true
    ) throws -> DevelopmentCertificates {
        let files = DevelopmentCertificates(directory: directory)
        try FileManager.default.createDirectory(
            atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let fm = FileManager.default
        // A CA kept from an earlier run is reused while it has more than a day to live.
        let caUsable =
            fm.fileExists(atPath: files.caCertificatePath) && fm.fileExists(atPath: files.caKeyPath)
            && (try? openssl(["x509", "-checkend", "86400", "-noout", "-in", files.caCertificatePath])) != nil
        // Keys are written into files made 0600 first: never readable by others, whatever the umask.
        try createPrivateFile(files.serverKeyPath)
        if !caUsable {
            try createPrivateFile(files.caKeyPath)
            try openssl([
                "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                "-keyout", files.caKeyPath, "-out", files.caCertificatePath, "-days", "30",
                "-subj", "/CN=Kiosk development CA",
                "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            ])
        }
        var names = includingLoopback ? ["DNS:localhost", "IP:127.0.0.1", "IP:::1"] : []
        for host in hosts where !(includingLoopback && ["localhost", "127.0.0.1", "::1"].contains(host)) {
            names.append(Loopback.isIPAddress(host) ? "IP:\(host)" : "DNS:\(host)")
        }
        let request = (directory as NSString).appendingPathComponent("server.csr")
        let extensions = (directory as NSString).appendingPathComponent("server.ext")
        defer {
            try? fm.removeItem(atPath: request)
            try? fm.removeItem(atPath: extensions)
        }
        try openssl([
            "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", files.serverKeyPath, "-out", request, "-subj", "/CN=\(hosts.first ?? "localhost")",
        ])
        let extensionText = """
            subjectAltName=\(names.joined(separator: ","))
            basicConstraints=CA:FALSE
            keyUsage=critical,digitalSignature
            extendedKeyUsage=serverAuth

            """
        try extensionText.write(toFile: extensions, atomically: true, encoding: .utf8)
        let serial = "0x" + (0..<16).map { _ in String(format: "%02x", UInt8.random(in: 0...255) & 0x7f) }.joined()
        try openssl([
            "x509", "-req", "-in", request, "-CA", files.caCertificatePath, "-CAkey", files.caKeyPath,
            "-set_serial", serial, "-days", "30", "-extfile", extensions, "-out", files.serverCertificatePath,
        ])
        return files
    }

    private static func createPrivateFile(_ path: String) throws {
        try? FileManager.default.removeItem(atPath: path)
        guard FileManager.default.createFile(atPath: path, contents: nil, attributes: [.posixPermissions: 0o600]) else {
            throw TransportSecurityError("cannot create \(path)")
        }
    }

    private static func openssl(_ arguments: [String]) throws {
        let candidates = ["/usr/bin/openssl", "/usr/local/bin/openssl", "/bin/openssl"]
        guard let executable = candidates.first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            throw TransportSecurityError(
                "the openssl command is needed to make development certificates (apt-get install -y openssl)")
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        let errors = Pipe()
        process.standardError = errors
        process.standardOutput = FileHandle.nullDevice
        do { try process.run() } catch { throw TransportSecurityError("cannot run \(executable): \(error)") }
        let output = errors.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw TransportSecurityError(
                "openssl \(arguments.first ?? "") failed: \(String(decoding: output, as: UTF8.self))")
        }
    }
}
