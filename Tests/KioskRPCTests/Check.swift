import Testing

/// `#expect` for conditions that mutate (state machine events): the macro
/// cannot expand a mutating call on a local, so these are checked as values.
func check(_ condition: Bool, _ comment: Comment? = nil, sourceLocation: SourceLocation = #_sourceLocation) {
    #expect(condition, comment, sourceLocation: sourceLocation)
}
