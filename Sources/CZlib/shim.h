#ifndef KIOSK_CZLIB_SHIM_H
#define KIOSK_CZLIB_SHIM_H
#include <zlib.h>
#endif
