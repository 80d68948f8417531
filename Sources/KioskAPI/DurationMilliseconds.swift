extension Duration {
    /// The duration in whole milliseconds (rounded toward zero).
    public var wholeMilliseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1000 + attoseconds / 1_000_000_000_000_000
    }
}
