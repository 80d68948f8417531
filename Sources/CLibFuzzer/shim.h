// libFuzzer's entry for programs that have their own main (LLVM >= 12,
// compiler-rt's libclang_rt.fuzzer): the kiosk-fuzz fuzzing build calls it
// from its @main. Declaration only; -sanitize=fuzzer links the definition.
#ifndef KIOSK_CLIBFUZZER_SHIM_H
#define KIOSK_CLIBFUZZER_SHIM_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*UserCb)(const uint8_t *Data, size_t Size));

#endif
