/* cmocka 1.1 API subset (Debian 12 ships 1.1.5), R10.8: the includes cmocka
 * needs before it, in one place, so a move to cmocka 2.x is one edit. */
#ifndef RUMOR_TESTS_CMOCKA_COMPAT_H
#define RUMOR_TESTS_CMOCKA_COMPAT_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#endif
