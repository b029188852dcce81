/*
 * parse.c - strict number parsers (see parse.h).
 */
#include "util/parse.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>

int ms_parse_long(const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    const long v = strtol(s, &end, 10);
    if (end == s || *end || errno || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int ms_parse_size(const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    if (!s || !isdigit((unsigned char)*s)) return -1;
    double v = strtod(s, &end);
    if (errno || end == s) return -1;
    uint64_t mul = 1;
    switch (toupper((unsigned char)*end)) {
    case 'K': mul = 1ULL << 10; end++; break;
    case 'M': mul = 1ULL << 20; end++; break;
    case 'G': mul = 1ULL << 30; end++; break;
    case 'T': mul = 1ULL << 40; end++; break;
    default: break;
    }
    if (mul > 1 && (*end == 'i' || *end == 'I')) end++;
    if (*end == 'B' || *end == 'b') end++;
    if (*end) return -1;
    const double bytes = v * (double)mul;
    if (bytes < 0 || bytes >= 18446744073709551616.0) return -1;
    *out = (uint64_t)bytes;
    return 0;
}
