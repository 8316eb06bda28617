/* version_check.c — the compile-time version (kvpool.h's macros), the run-time version (the
 * loaded library) and, when built by CMake, the version of the CMake package it was found
 * through all agree. C99; exits non-zero on a mismatch.
 *
 * A program should make the ABI check at start-up: KVP_ABI_VERSION is what it was compiled
 * against, kvp_abi_version() what the dynamic loader gave it. */
#include <stdio.h>
#include <string.h>

#include "kvpool.h"

#define STR2(x) #x
#define STR(x) STR2(x)
#define HEADER_VERSION STR(KVP_VERSION_MAJOR) "." STR(KVP_VERSION_MINOR) "." STR(KVP_VERSION_PATCH)

static int failures = 0;

static void expect(int ok, const char *what) {
    if (!ok) {
        fprintf(stderr, "version_check: MISMATCH: %s\n", what);
        failures++;
    }
}

int main(void) {
    printf("version_check: header %s (ABI %d), library %s (ABI %u)", HEADER_VERSION,
           KVP_ABI_VERSION, kvp_version(), kvp_abi_version());
#ifdef KVPOOL_PACKAGE_VERSION
    printf(", package %s", KVPOOL_PACKAGE_VERSION);
    expect(strcmp(KVPOOL_PACKAGE_VERSION, HEADER_VERSION) == 0,
           "the package version is not the header's");
#endif
    printf("\n");
    expect(kvp_abi_version() == KVP_ABI_VERSION, "kvp_abi_version() != KVP_ABI_VERSION");
    expect(strcmp(kvp_version(), HEADER_VERSION) == 0, "kvp_version() != the header's macros");
    /* while kvpool is 0.x, the ABI version is the minor version */
    expect(KVP_VERSION_MAJOR != 0 || KVP_ABI_VERSION == KVP_VERSION_MINOR,
           "KVP_ABI_VERSION is not the minor version");
    if (failures != 0) return 1;
    printf("version_check: OK\n");
    return 0;
}
