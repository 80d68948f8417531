/// A function held by reference, to keep in a lock-protected box (`NIOLockedValueBox`).
///
/// A function that is itself a box's value gains a reabstraction thunk each time it is read through the box's
/// `inout` access (the value goes out through the generic parameter and is written back wrapped), so every call
/// through it walks a longer chain than the one before: a hook read once a write made each write slower than the
/// last. A class holding the function is read and written back as a pointer. `Scripts/lint.sh` refuses a box whose
/// value is a function.
package final class FunctionReference<Function: Sendable>: Sendable {
    package let function: Function

    package init(_ function: Function) { self.function = function }
}
