import Logging

/// Sends every logger of the process to standard error at `level` (a
/// `Logger.Level` name: trace … critical; unknown names mean info). For
/// service executables; libraries never bootstrap logging themselves.
public func bootstrapStandardErrorLogging(level: String) {
    let threshold = Logger.Level(rawValue: level) ?? .info
    LoggingSystem.bootstrap { label in
        var handler = StreamLogHandler.standardError(label: label)
        handler.logLevel = threshold
        return handler
    }
}
