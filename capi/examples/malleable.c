/*
 * malleable.c: the smallest complete malleable program over libdynres (the guide,
 * docs/guide.md). It works in iterations and, between two, takes whatever resource
 * change the runtime announces — requested from outside with `dynres grow JOB +K`,
 * `dynres shrink JOB -K` or `dynres replace JOB -R +A` — and goes on at the new size:
 *
 *   dynres run -n 2 --max 8 -- ./malleable STOPFILE
 *
 * It stops (every process, at the same iteration) once the file STOPFILE exists and no
 * change is in flight. Rank 0 (the root) prints one line per decided change:
 * "malleable: ADD finalized, size 4".
 *
 * Who decides what: the root queries the change (phase 1), makes the application's
 * pset the union with the added processes and/or the difference with the removed ones
 * (phase 2) and accepts it (phase 3). The others learn each iteration's outcome from the
 * root through the runtime's data server (C has no communicator here): key "mal/<i>" =
 * "<stop> <nremoved> <rank>...". Added processes confirm the change and look up
 * "mal/join/<delta>", the first iteration they take part in; removed ones finalize and
 * exit.
 */
#define _POSIX_C_SOURCE 200809L
#include "example.h"

#include <time.h>
#include <unistd.h>

#define SEC 1000000000ull
#define MAXRANKS 1024

static dynres_session *s;

static void lookup(const char *key, char *value, size_t cap) {
  size_t len;
  OK(dynres_lookup(s, key, 60 * SEC, value, cap, &len));
}

static const char *kind_name(int kind) {
  return kind == DYNRES_RC_ADD ? "ADD" : kind == DYNRES_RC_SUB ? "SUB" : "REPLACE";
}

/* The root's step: query, apply to the application's pset, accept. Returns 1 once the
 * change it works on is decided (removed ranks in `removed`), 0 otherwise. */
static int root_step(const char *app, int it, uint32_t *removed, size_t *nremoved,
                     int *busy) {
  static int pending, kind;
  static char delta[DYNRES_PSET_NAME_CAP];
  *nremoved = 0;
  if (!pending) {
    dynres_res_change q;
    OK(dynres_get_res_change(s, NULL, &q)); /* phase 1 */
    if (q.kind == DYNRES_RC_NONE || q.status != DYNRES_STATUS_ANNOUNCED) {
      *busy = 0;
      return 0;
    }
    dynres_pset_name result; /* phase 2: app ∖ removed, then ∪ added */
    if (q.kind == DYNRES_RC_SUB || q.kind == DYNRES_RC_REPLACE)
      OK(dynres_pset_op(s, DYNRES_OP_DIFFERENCE, app,
                        q.kind == DYNRES_RC_SUB ? q.delta.name : q.sub_delta.name, app,
                        &result));
    if (q.kind == DYNRES_RC_ADD || q.kind == DYNRES_RC_REPLACE)
      OK(dynres_pset_op(s, DYNRES_OP_UNION, app, q.delta.name, app, &result));
    pending = 1;
    kind = q.kind;
    copy_name(delta, q.delta.name);
  }
  *busy = 1;
  dynres_accept_result a; /* phase 3, until the change is decided */
  OK(dynres_accept_res_change_blocking(s, delta, app, NULL, 30 * SEC, &a));
  if (a.status != DYNRES_STATUS_FINALIZED) return 0;
  OK(dynres_session_removed(s, removed, MAXRANKS, nremoved));
  if (kind != DYNRES_RC_SUB) { /* tell the added processes where to start */
    char key[300], value[32];
    snprintf(key, sizeof key, "mal/join/%s", delta);
    snprintf(value, sizeof value, "%d", it + 1);
    OK(dynres_publish(s, key, value));
  }
  dynres_pset_info info;
  OK(dynres_get_pset_info(s, app, &info));
  printf("malleable: %s finalized, size %llu\n", kind_name(kind),
         (unsigned long long)info.size);
  fflush(stdout);
  pending = 0;
  return 1;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s STOPFILE\n", argv[0]);
    return 2;
  }
  uint32_t rank;
  OK(dynres_session_init(&s));
  OK(dynres_session_rank(s, &rank));
  snprintf(example_tag, sizeof example_tag, "malleable.c[%u]", rank);
  dynres_pset_name app;
  OK(dynres_session_app_pset(s, &app));

  /* Was this process added by a change (ADD or REPLACE)? Then confirm it and join. */
  int it = 1;
  dynres_res_change me;
  OK(dynres_get_res_change(s, "mpi://SELF", &me));
  if (me.incl && (me.kind == DYNRES_RC_ADD || me.kind == DYNRES_RC_REPLACE) &&
      (me.status == DYNRES_STATUS_ANNOUNCED || me.status == DYNRES_STATUS_PENDING)) {
    dynres_pset_name main_pset;
    char key[300], value[32];
    OK(dynres_confirm_res_change(s, me.delta.name, 30 * SEC, &main_pset));
    snprintf(key, sizeof key, "mal/join/%s", me.delta.name);
    lookup(key, value, sizeof value);
    it = atoi(value);
  }
  /* The root is rank 0 for the whole run: a shrink or replace without named victims
   * takes the processes on the highest occupied slots (RC-5), and rank 0 holds the
   * lowest. */
  int root = rank == 0;

  for (;; it++) {
    struct timespec t = {0, 50 * 1000 * 1000}; /* the work of one iteration */
    nanosleep(&t, NULL);
    char key[64], value[DYNRES_VALUE_MAX + 1];
    snprintf(key, sizeof key, "mal/%d", it);
    uint32_t removed[MAXRANKS];
    size_t nremoved = 0;
    int stop = 0;
    if (root) {
      int busy;
      root_step(app.name, it, removed, &nremoved, &busy);
      stop = !busy && access(argv[1], F_OK) == 0;
      size_t l = (size_t)snprintf(value, sizeof value, "%d %zu", stop, nremoved);
      for (size_t i = 0; i < nremoved && l < sizeof value; i++)
        l += (size_t)snprintf(value + l, sizeof value - l, " %u", removed[i]);
      OK(dynres_publish(s, key, value));
    } else {
      int used;
      lookup(key, value, sizeof value);
      const char *v = value;
      if (sscanf(v, "%d %zu%n", &stop, &nremoved, &used) != 2 || nremoved > MAXRANKS)
        fail("bad outcome '%s'", value);
      for (size_t i = 0; i < nremoved; i++) {
        v += used;
        if (sscanf(v, " %u%n", &removed[i], &used) != 1) fail("bad outcome '%s'", value);
      }
    }
    for (size_t i = 0; i < nremoved; i++) {
      if (removed[i] == rank) { /* removed by the change: finalize and exit */
        OK(dynres_session_finalize(s));
        return 0;
      }
    }
    if (stop) break;
  }
  OK(dynres_fence(s, app.name, 30 * SEC));
  if (root) printf("malleable: stopped at iteration %d\n", it);
  OK(dynres_session_finalize(s));
  return 0;
}
