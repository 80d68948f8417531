#ifndef KIOSK_CPROTOBUFC_SHIM_H
#define KIOSK_CPROTOBUFC_SHIM_H
#include <protobuf-c/protobuf-c.h>
#endif
