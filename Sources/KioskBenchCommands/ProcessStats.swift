import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// CPU time and peak memory of a process.
struct ProcessStats {
    var cpuSeconds: Double
    var peakRSSBytes: Int

    /// This process (getrusage).
    static func current() -> ProcessStats {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        let cpu =
            Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6
            + Double(usage.ru_stime.tv_sec) + Double(usage.ru_stime.tv_usec) / 1e6
        return ProcessStats(cpuSeconds: cpu, peakRSSBytes: Int(usage.ru_maxrss) * 1024)
    }

    /// Another process, from /proc/PID (CPU from stat, peak RSS from VmHWM).
    static func of(pid: Int32) -> ProcessStats? {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
            let close = stat.lastIndex(of: ")")
        else { return nil }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        // After the command: state is field 3; utime and stime are fields 14 and 15.
        guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else { return nil }
        let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))
        let hwm =
            status.split(separator: "\n").first { $0.hasPrefix("VmHWM:") }?
            .split(separator: " ").dropFirst().first.flatMap { Int($0) } ?? 0
        return ProcessStats(cpuSeconds: (user + system) / ticks, peakRSSBytes: hwm * 1024)
    }

    /// The CPUs this process may run on ("0-1"; "0" under `taskset -c 0`) and how many the machine has,
    /// so a pinned run says so in its own report.
    static func placement() -> String {
        let status = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
        let allowed =
            status.split(separator: "\n").first { $0.hasPrefix("Cpus_allowed_list:") }?
            .split(separator: "\t").last.map(String.init) ?? "?"
        return "\(allowed) of \(sysconf(Int32(_SC_NPROCESSORS_ONLN)))"
    }
}
