#ifndef KIOSK_CPROTOBUFC_SHIM_H
#define KIOSK_CPROTOBUFC_SHIM_H
#include <protobuf-c/protobuf-c.h>
#include <stdint.h>
#include <stdlib.h>

/* A bump allocator for protobuf_c_message_unpack over a caller's buffer (on
 * the stack): a decoded message's struct, strings and bytes are carved out of
 * it instead of one malloc each, and "freeing" them is a no-op. What does not
 * fit falls back to malloc, and is freed as usual (free tells the two apart by
 * address). The decoder resets it after each message. */
typedef struct {
    ProtobufCAllocator allocator; /* first: protobuf-c gets a pointer to this */
    uint8_t *base;
    size_t capacity;
    size_t used;
} KioskUnpackArena;

static inline void *kiosk_unpack_arena_alloc(void *data, size_t size) {
    KioskUnpackArena *arena = (KioskUnpackArena *)data;
    size_t rounded = (size + 15) & ~(size_t)15;
    if (rounded >= size && rounded <= arena->capacity - arena->used) {
        void *p = arena->base + arena->used;
        arena->used += rounded;
        return p;
    }
    return malloc(size);
}

static inline void kiosk_unpack_arena_free(void *data, void *pointer) {
    KioskUnpackArena *arena = (KioskUnpackArena *)data;
    uint8_t *p = (uint8_t *)pointer;
    if (p >= arena->base && p < arena->base + arena->capacity) return;
    free(pointer);
}

/* Prepares `arena` over `capacity` bytes at `base` (16-byte aligned). */
static inline void kiosk_unpack_arena_init(KioskUnpackArena *arena, void *base, size_t capacity) {
    arena->allocator.alloc = kiosk_unpack_arena_alloc;
    arena->allocator.free = kiosk_unpack_arena_free;
    arena->allocator.allocator_data = arena;
    arena->base = (uint8_t *)base;
    arena->capacity = capacity;
    arena->used = 0;
}
#endif
