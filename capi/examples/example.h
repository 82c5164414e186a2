/*
 * example.h: what the C examples share: failing loudly and checking dynres' codes.
 */
#ifndef DYNRES_EXAMPLE_H
#define DYNRES_EXAMPLE_H

#include <dynres.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What failure messages start with (the program, and the rank where there is one). */
static char example_tag[64] = "example";

/* Prints "TAG: FAILED: ..." on stderr and exits with status 1. */
static void fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s: FAILED: ", example_tag);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  exit(1);
}

/* A dynres call that must succeed: otherwise fail with the code's name and message. */
#define OK(call)                                                                     \
  do {                                                                               \
    int rc_ = (call);                                                                \
    if (rc_ != DYNRES_OK)                                                            \
      fail("%s:%d: %s: %s: %s", __FILE__, __LINE__, #call, dynres_error_name(rc_),   \
           dynres_last_error());                                                     \
  } while (0)

/* A condition that must hold: otherwise fail with the message. */
#define CHECK(cond, ...)                                                             \
  do {                                                                               \
    if (!(cond)) fail(__VA_ARGS__);                                                  \
  } while (0)

/* Copies a NUL-terminated pset name into a DYNRES_PSET_NAME_CAP array. */
static void copy_name(char *dst, const void *src) {
  size_t n = strnlen(src, DYNRES_PSET_NAME_CAP - 1);
  memcpy(dst, src, n);
  dst[n] = 0;
}

#endif
