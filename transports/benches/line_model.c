/*
 * line_model: the shm device's cache-line traffic without the device's software, as a
 * two-thread ping-pong in C (issue 15, eighth pass). It separates what the exchange
 * costs on this machine's cores from what the device's code adds on top.
 *
 *   gcc -O2 -pthread -o /tmp/line_model transports/benches/line_model.c
 *   /tmp/line_model <layout> [bytes] [ring_bytes] [delay]
 *
 * layout:
 *   flag   the bench's raw baseline: the payload in a fixed buffer, a flag on its own
 *          line; the receiver spins on the flag, then copies the payload out.
 *   stamp  the device's record: three head words, the payload from byte 32, the mark
 *          word (with the record's stamp) stored last in the record's first line, and
 *          everything past that line written before it; the producer then stores
 *          `head` and does the notify's locked add, the consumer stores `tail`. The
 *          receiver watches the stamp only.
 *   both   as `stamp`, but the receiver watches `head` as well (the device's poll).
 * bytes:   payload per message (default 1).
 * ring_bytes: ring size for stamp/both (default 262144; records never straddle it).
 * delay:   iterations of a dummy loop added on each side between receiving and
 *          replying (the device's code sits there); `delay_ns` is printed.
 *
 * Prints the one-way median over 20 batches (half a round trip). Pin nothing else to
 * CPUs 0 and 1 meanwhile; run each layout several times: this machine's timings move
 * between runs (see transports/README.md).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ROUNDS 20
#define PER_ROUND 20000
#define MAX_RING (1 << 22)
#define MAX_BYTES (1 << 16)

enum layout { FLAG, STAMP, BOTH };
static enum layout layout;
static size_t bytes = 1, ring_bytes = 262144;
static int delay;

struct line {
  _Alignas(64) _Atomic uint64_t v;
};
/* flag[d], head[d], tail[d], wait[d]: direction d = 0 (A to B) or 1 (B to A). */
static struct line flag[2], head[2], tail[2], wait_word[2];
static _Alignas(4096) char fixed[2][MAX_BYTES];
static _Alignas(4096) char ring[2][MAX_RING];
static char src[MAX_BYTES], dst[2][MAX_BYTES];

static void pin(int cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  sched_setaffinity(0, sizeof s, &s);
}

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}

static void burn(void) {
  for (volatile int i = 0; i < delay; i++) {
  }
}

static size_t record_len(void) { return (32 + bytes + 63) / 64 * 64; }

/* Each side's own position in the ring it writes and in the one it reads. */
static __thread uint64_t wpos, rpos;

static char *record_at(int d, uint64_t *pos) {
  if (*pos % ring_bytes + record_len() > ring_bytes)
    *pos = (*pos / ring_bytes + 1) * ring_bytes;
  return ring[d] + *pos % ring_bytes;
}

static void put(int d, uint64_t k) {
  if (layout == FLAG) {
    memcpy(fixed[d], src, bytes);
    atomic_store_explicit(&flag[d].v, k, memory_order_release);
    return;
  }
  char *l = record_at(d, &wpos);
  size_t near = bytes < 32 ? bytes : 32;
  memcpy(l + 64, src + near, bytes - near);
  ((volatile uint64_t *)l)[0] = k;
  ((volatile uint64_t *)l)[1] = 1;
  ((volatile uint64_t *)l)[2] = bytes;
  memcpy(l + 32, src, near);
  atomic_store_explicit((_Atomic uint64_t *)(l + 24), k, memory_order_release);
  wpos += record_len();
  atomic_store_explicit(&head[d].v, wpos, memory_order_release);
  atomic_fetch_add_explicit(&wait_word[d].v, 1, memory_order_seq_cst);
}

static void get(int d, uint64_t k) {
  if (layout == FLAG) {
    while (atomic_load_explicit(&flag[d].v, memory_order_acquire) < k)
      __builtin_ia32_pause();
    memcpy(dst[d], fixed[d], bytes);
    return;
  }
  uint64_t at = rpos;
  char *l = record_at(d, &at);
  uint64_t end = at + record_len();
  for (;;) {
    if (atomic_load_explicit((_Atomic uint64_t *)(l + 24), memory_order_acquire) == k)
      break;
    if (layout == BOTH && atomic_load_explicit(&head[d].v, memory_order_acquire) >= end)
      break;
    __builtin_ia32_pause();
  }
  if (((volatile uint64_t *)l)[0] != k) {
    fprintf(stderr, "line_model: record %llu read wrong\n", (unsigned long long)k);
    exit(1);
  }
  memcpy(dst[d], l + 32, bytes);
  rpos = end;
  atomic_store_explicit(&tail[d].v, rpos, memory_order_release);
}

static void *echo(void *arg) {
  (void)arg;
  pin(1);
  for (uint64_t k = 1; k <= (uint64_t)ROUNDS * PER_ROUND; k++) {
    get(0, k);
    burn();
    put(1, k);
  }
  return NULL;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: line_model flag|stamp|both [bytes] [ring_bytes] [delay]\n");
    return 2;
  }
  if (!strcmp(argv[1], "flag"))
    layout = FLAG;
  else if (!strcmp(argv[1], "stamp"))
    layout = STAMP;
  else if (!strcmp(argv[1], "both"))
    layout = BOTH;
  else {
    fprintf(stderr, "line_model: unknown layout %s\n", argv[1]);
    return 2;
  }
  if (argc > 2)
    bytes = strtoul(argv[2], NULL, 10);
  if (argc > 3)
    ring_bytes = strtoul(argv[3], NULL, 10);
  if (argc > 4)
    delay = atoi(argv[4]);
  if (bytes < 1 || bytes > MAX_BYTES || ring_bytes < record_len() || ring_bytes > MAX_RING ||
      ring_bytes % 64) {
    fprintf(stderr, "line_model: bytes 1..%d, ring_bytes a multiple of 64 in %zu..%d\n",
            MAX_BYTES, record_len(), MAX_RING);
    return 2;
  }
  /* No stale stamp may match: fill the rings with bytes no stamp has. */
  memset(ring, 0xff, sizeof ring);
  double t0 = now_ns();
  for (int i = 0; i < 1000000; i++)
    burn();
  double delay_ns = (now_ns() - t0) / 1e6;

  pthread_t t;
  pthread_create(&t, NULL, echo, NULL);
  pin(0);
  double one_way[ROUNDS];
  uint64_t k = 1;
  for (int r = 0; r < ROUNDS; r++) {
    double start = now_ns();
    for (int i = 0; i < PER_ROUND; i++, k++) {
      put(0, k);
      get(1, k);
      burn();
    }
    one_way[r] = (now_ns() - start) / PER_ROUND / 2;
  }
  pthread_join(t, NULL);
  qsort(one_way, ROUNDS, sizeof one_way[0], cmp);
  printf("%s bytes %zu ring %zu delay_ns %.1f: one-way median %.1f ns (min %.1f)\n", argv[1],
         bytes, layout == FLAG ? (size_t)0 : ring_bytes, delay_ns, one_way[ROUNDS / 2],
         one_way[0]);
  return 0;
}
