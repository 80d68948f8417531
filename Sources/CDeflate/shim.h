#ifndef KIOSK_CDEFLATE_SHIM_H
#define KIOSK_CDEFLATE_SHIM_H
#include <libdeflate.h>
#endif
