/*
 * synthetic.c: the synthetic malleable loop of the thesis (Lst. 6.7) in C, over
 * dynres' client library. Run it under the runtime:
 *
 *   dynres run -n 2 --max 8 -- ./synthetic PLAN ITERATIONS FREQ [-b]
 *
 * PLAN is a comma-separated list of changes the root requests, one every FREQ
 * iterations: "+2" adds two processes, "-2" removes two (e.g. "+2,-2,+3,-3"). Each
 * iteration does a little work; then rank 0 (the root) runs one resource-change step:
 * request (when due) and query the change (phase 1), apply it to the application's pset
 * (phase 2), accept it (phase 3; -b: blocking). New processes confirm the change they
 * were added by and join the loop; removed ones finalize and exit.
 *
 * The C boundary has no communicator, so the root tells the others what happened
 * through the runtime's data server: each iteration it publishes
 * "syn/it/<i>" = "<stop> <nprocs> <nremoved> <rank>...", which the others look up
 * (waiting); new processes look up "syn/join/<delta>" for the iteration they join at.
 * At the end every process fences over the application's pset and the root
 * unpublishes its per-iteration keys.
 *
 * The root checks that the job went through the sizes the plan implies and prints
 * "synthetic.c: sizes 2 4 2 ... as planned"; the exit status is 0 only then.
 */
#define _POSIX_C_SOURCE 200809L
#include "example.h"

#include <time.h>

#define SEC 1000000000ull
#define MAXPLAN 32
#define MAXRANKS 1024

static dynres_session *s;
static uint32_t rank;

/* A little work: a Monte Carlo estimate of pi. */
static double work(void) {
  unsigned seed = 12345u + rank;
  long in = 0, n = 200000;
  for (long i = 0; i < n; i++) {
    double x = (double)rand_r(&seed) / RAND_MAX, y = (double)rand_r(&seed) / RAND_MAX;
    in += x * x + y * y <= 1.0;
  }
  struct timespec t = {0, 10 * 1000 * 1000};
  nanosleep(&t, NULL);
  return 4.0 * (double)in / (double)n;
}

static double seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void lookup(const char *key, char *value, size_t cap) {
  size_t len;
  OK(dynres_lookup(s, key, 60 * SEC, value, cap, &len));
}

/* ---- the root's resource-change step ---- */

static int plan[MAXPLAN], nplan, next_item, freq = 1, blocking;
static int outstanding; /* requested, not decided yet */
static double refused_since; /* when the current request was first refused, 0 if not */
static int pending, pkind;
static char pdelta[DYNRES_PSET_NAME_CAP];
static uint64_t sizes[MAXPLAN + 1];
static int nsizes;

typedef struct {
  int stop;
  uint64_t nprocs;
  size_t nremoved;
  uint32_t removed[MAXRANKS];
} outcome;


static uint64_t size_of(const char *pset) {
  dynres_pset_info info;
  OK(dynres_get_pset_info(s, pset, &info));
  return info.size;
}

static void root_step(int it, int iterations, const char *app, outcome *o, char *event,
                      size_t ecap) {
  int finalized_now = 0;
  event[0] = 0;
  if (!pending) {
    /* Phase 1: request (when due), then query. */
    if (it % freq == 0 && next_item < nplan) {
      int k = plan[next_item];
      dynres_change_request req = {.kind = k > 0 ? DYNRES_RC_ADD : DYNRES_RC_SUB,
                                   .app = NULL, .add = k > 0 ? (uint32_t)k : 0,
                                   .sub = k < 0 ? (uint32_t)-k : 0, .victims = NULL,
                                   .nvictims = 0, .bound = NULL};
      dynres_pset_name delta;
      int queued;
      int rc = dynres_request_res_change(s, &req, &delta, &queued);
      if (rc == DYNRES_OK) {
        next_item++;
        outstanding++;
        refused_since = 0;
      } else if (rc == DYNRES_ERR_RC_SLOTS && (refused_since == 0 || seconds() - refused_since < 60)) {
        /* Removed processes keep their slots until they have exited (SLOT-3): ask
         * again at the next due iteration, for up to a minute. */
        if (refused_since == 0) {
          refused_since = seconds();
          fprintf(stderr, "synthetic.c: %+d refused for now (%s); asking again\n", k,
                  dynres_last_error());
        }
      } else {
        fail("request %+d: %s: %s", k, dynres_error_name(rc), dynres_last_error());
      }
    }
    dynres_res_change q;
    OK(dynres_get_res_change(s, NULL, &q));
    if (q.kind != DYNRES_RC_NONE && q.status == DYNRES_STATUS_ANNOUNCED) {
      /* Phase 2: the application's pset becomes app ∪ delta or app ∖ delta. */
      if (q.kind != DYNRES_RC_ADD && q.kind != DYNRES_RC_SUB) fail("kind %d", q.kind);
      dynres_pset_name result;
      OK(dynres_pset_op(s, q.kind == DYNRES_RC_ADD ? DYNRES_OP_UNION : DYNRES_OP_DIFFERENCE,
                        app, q.delta.name, app, &result));
      if (strcmp(result.name, app) != 0) fail("phase 2 made %s", result.name);
      pending = 1;
      pkind = q.kind;
      copy_name(pdelta, q.delta.name);
    }
  }
  if (pending) {
    /* Phase 3: accept, until the change is decided. */
    dynres_accept_result a;
    if (blocking)
      OK(dynres_accept_res_change_blocking(s, pdelta, app, NULL, 30 * SEC, &a));
    else
      OK(dynres_accept_res_change(s, pdelta, app, NULL, &a));
    if (a.status == DYNRES_STATUS_FINALIZED) {
      OK(dynres_session_removed(s, o->removed, MAXRANKS, &o->nremoved));
      if (o->nremoved != a.nremoved) fail("%zu removed ranks, %llu announced", o->nremoved,
                                         (unsigned long long)a.nremoved);
      if (pkind == DYNRES_RC_ADD) {
        char key[300], value[32];
        snprintf(key, sizeof key, "syn/join/%s", pdelta);
        snprintf(value, sizeof value, "%d", it + 1);
        OK(dynres_publish(s, key, value));
      }
      sizes[nsizes++] = size_of(app);
      snprintf(event, ecap, "%s:finalized", pkind == DYNRES_RC_ADD ? "add" : "sub");
      pending = 0;
      outstanding--;
      finalized_now = 1;
    } else if (a.status != DYNRES_STATUS_PENDING) {
      fail("change %s is %d", pdelta, a.status);
    } else {
      snprintf(event, ecap, "%s:pending", pkind == DYNRES_RC_ADD ? "add" : "sub");
    }
  }
  o->nprocs = size_of(app);
  o->stop = it >= iterations && next_item == nplan && !outstanding && !pending &&
            !finalized_now;
}

static void encode(const outcome *o, char *v, size_t cap) {
  size_t l = (size_t)snprintf(v, cap, "%d %llu %zu", o->stop, (unsigned long long)o->nprocs,
                              o->nremoved);
  for (size_t i = 0; i < o->nremoved && l < cap; i++)
    l += (size_t)snprintf(v + l, cap - l, " %u", o->removed[i]);
}

static void decode(const char *v, outcome *o) {
  unsigned long long n;
  int used;
  if (sscanf(v, "%d %llu %zu%n", &o->stop, &n, &o->nremoved, &used) != 3 ||
      o->nremoved > MAXRANKS)
    fail("bad outcome '%s'", v);
  o->nprocs = n;
  v += used;
  for (size_t i = 0; i < o->nremoved; i++) {
    if (sscanf(v, " %u%n", &o->removed[i], &used) != 1) fail("bad outcome ranks");
    v += used;
  }
}

static void parse_plan(const char *p) {
  char *copy = strdup(p), *save = NULL;
  if (!copy) fail("out of memory");
  for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    if (nplan == MAXPLAN) fail("plan too long");
    int k = atoi(t);
    if (k == 0 || (t[0] != '+' && t[0] != '-')) fail("bad plan item '%s'", t);
    plan[nplan++] = k;
  }
  free(copy);
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s PLAN ITERATIONS FREQ [-b]\n", argv[0]);
    return 2;
  }
  parse_plan(argv[1]);
  int iterations = atoi(argv[2]);
  freq = atoi(argv[3]) > 0 ? atoi(argv[3]) : 1;
  blocking = argc > 4 && strcmp(argv[4], "-b") == 0;

  OK(dynres_session_init(&s));
  OK(dynres_session_rank(s, &rank));
  snprintf(example_tag, sizeof example_tag, "synthetic.c[%u]", rank);
  dynres_pset_name app;
  OK(dynres_session_app_pset(s, &app));

  /* Lst. 6.7: was this process added by a change? Then confirm it and join. */
  dynres_res_change me;
  int it = 1;
  OK(dynres_get_res_change(s, "mpi://SELF", &me));
  if (me.incl && me.kind == DYNRES_RC_ADD &&
      (me.status == DYNRES_STATUS_ANNOUNCED || me.status == DYNRES_STATUS_PENDING)) {
    dynres_pset_name main_pset;
    char key[300], value[32];
    OK(dynres_confirm_res_change(s, me.delta.name, 30 * SEC, &main_pset));
    if (strcmp(main_pset.name, app.name) != 0) fail("confirmed into %s", main_pset.name);
    snprintf(key, sizeof key, "syn/join/%s", me.delta.name);
    lookup(key, value, sizeof value);
    it = atoi(value);
  } else {
    OK(dynres_fence(s, app.name, 30 * SEC));
  }
  int is_root = rank == 0;
  if (is_root) {
    sizes[nsizes++] = size_of(app.name);
    printf("iteration,nprocs,event\n");
  }

  static outcome o;
  for (;; it++) {
    double pi = work();
    if (pi < 3.0 || pi > 3.3) fail("pi = %f", pi);
    char key[64], value[DYNRES_VALUE_MAX + 1];
    snprintf(key, sizeof key, "syn/it/%d", it);
    if (is_root) {
      char event[32];
      memset(&o, 0, sizeof o);
      root_step(it, iterations, app.name, &o, event, sizeof event);
      encode(&o, value, sizeof value);
      OK(dynres_publish(s, key, value));
      printf("%d,%llu,%s\n", it, (unsigned long long)o.nprocs, event);
      fflush(stdout);
    } else {
      lookup(key, value, sizeof value);
      decode(value, &o);
      for (size_t i = 0; i < o.nremoved; i++) {
        if (o.removed[i] == rank) {
          /* Removed by the change: finalize and exit. */
          OK(dynres_session_finalize(s));
          return 0;
        }
      }
    }
    if (o.stop) break;
  }

  /* Everyone left is here: a last fence, then the root cleans its keys up. */
  OK(dynres_fence(s, app.name, 30 * SEC));
  if (is_root) {
    for (int i = 1; i <= it; i++) {
      char key[64];
      snprintf(key, sizeof key, "syn/it/%d", i);
      OK(dynres_unpublish(s, key));
    }
    uint64_t want = sizes[0];
    int good = nsizes == nplan + 1;
    printf("synthetic.c: sizes");
    for (int i = 0; i < nsizes; i++) printf(" %llu", (unsigned long long)sizes[i]);
    for (int i = 0; good && i < nplan; i++) {
      want = (uint64_t)((int64_t)want + plan[i]);
      good = sizes[i + 1] == want;
    }
    printf(" %s\n", good ? "as planned" : "NOT as planned");
    fflush(stdout);
    if (!good) fail("the job did not go through the planned sizes");
  }
  OK(dynres_session_finalize(s));
  return 0;
}
