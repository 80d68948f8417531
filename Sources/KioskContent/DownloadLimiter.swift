import NIOConcurrencyHelpers

/// Counts running downloads, per account and in total, against their limits.
final class DownloadLimiter: Sendable {
    private let perAccount: Int
    private let total: Int
    private let state = NIOLockedValueBox<(total: Int, byAccount: [String: Int])>((0, [:]))

    init(perAccount: Int, total: Int) {
        self.perAccount = perAccount
        self.total = total
    }

    /// Takes a slot for `account`; nil and a reason when a limit is reached.
    func acquire(account: String) -> String? {
        state.withLockedValue { state in
            if state.total >= total { return "the server is running its maximum of \(total) downloads; retry later" }
            let mine = state.byAccount[account, default: 0]
            if mine >= perAccount { return "this account is running its maximum of \(perAccount) downloads" }
            state.total += 1
            state.byAccount[account] = mine + 1
            return nil
        }
    }

    func release(account: String) {
        state.withLockedValue { state in
            state.total -= 1
            let mine = state.byAccount[account, default: 1] - 1
            state.byAccount[account] = mine > 0 ? mine : nil
        }
    }

    var active: Int { state.withLockedValue { $0.total } }
}
