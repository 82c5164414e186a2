/*
 * toy_runtime.c: a toy runtime that embeds dynres' kernel (one master, two daemons, one
 * client per process) in one process and carries every frame in memory. It drives an
 * ADD of 2 and a SUB of 2 through the whole protocol (thesis Lst. 6.7: query, pset
 * operation, accept; the new processes confirm) to FINALIZED, asserting each status,
 * then tours the pset registry and the error paths of the C boundary.
 *
 * Build: cc -Wall -Werror toy_runtime.c $(pkg-config --cflags --libs dynres)
 * Exit status 0 and a last line "toy_runtime: ok" when every check held.
 */
#define _POSIX_C_SOURCE 200809L
#include "example.h"

#define NS "toy"
#define APP "app"
#define APP_PSET "mpi://app/app"
#define NODES 2
#define SLOTS 4
#define START 4
#define MAXP 16
#define BUFCAP 65536
#define SMALL 16

/* ---- the in-memory network: one FIFO of frames ---- */

enum { TO_MASTER, TO_DAEMON_FROM_MASTER, TO_DAEMON_FROM_CLIENT, TO_CLIENT };

typedef struct msg {
  int kind;
  uint32_t dest; /* node or rank */
  uint32_t src;  /* node or rank */
  size_t len;
  uint8_t *bytes;
  struct msg *next;
} msg;

static msg *head, *tail;
static uint64_t now_ns = 1;
static unsigned long delivered;

static void enqueue(int kind, uint32_t dest, uint32_t src, const uint8_t *b, size_t len) {
  msg *m = calloc(1, sizeof *m);
  CHECK(m != NULL, "out of memory");
  m->bytes = malloc(len ? len : 1);
  CHECK(m->bytes != NULL, "out of memory");
  memcpy(m->bytes, b, len);
  m->kind = kind;
  m->dest = dest;
  m->src = src;
  m->len = len;
  if (tail) tail->next = m; else head = m;
  tail = m;
}

/* ---- the job ---- */

enum { IDLE, SELF_QUERY, CONFIRMING, ROOT_QUERY, ROOT_OP, ROOT_ACCEPT };

typedef struct {
  dynres_client *client;
  uint32_t node;
  int alive;
  int state;
  uint64_t next_call;
  char new_pset[DYNRES_PSET_NAME_CAP]; /* after a confirm */
} proc;

static dynres_master *master;
static dynres_daemon *daemons[NODES];
static proc procs[MAXP];

/* What the master reported. */
static struct { char delta[DYNRES_PSET_NAME_CAP]; int status; } statuses[64];
static int nstatuses;
static char started_delta[DYNRES_PSET_NAME_CAP];
static uint64_t started_ticket;
static int released[NODES], allocated[NODES];

/* The root's view of the change it adapts to. */
static struct {
  int kind;
  char delta[DYNRES_PSET_NAME_CAP];
  int accept_status;
  uint32_t removed[MAXP];
  size_t nremoved;
} root;

static uint8_t buf[BUFCAP];


/* Polls one machine's next action: first with a small buffer, so that the
 * too-small path is taken whenever a payload is larger, then with a large one. */
typedef int (*poll_fn)(void *h, dynres_action *a, dynres_result *r, uint8_t *b, size_t cap);

static int poll_master(void *h, dynres_action *a, dynres_result *r, uint8_t *b, size_t cap) {
  (void)r;
  return dynres_master_poll_output(h, a, b, cap);
}
static int poll_daemon(void *h, dynres_action *a, dynres_result *r, uint8_t *b, size_t cap) {
  (void)r;
  return dynres_daemon_poll_output(h, a, b, cap);
}
static int poll_client(void *h, dynres_action *a, dynres_result *r, uint8_t *b, size_t cap) {
  return dynres_client_poll_output(h, a, r, b, cap);
}

static int next_action(poll_fn poll, void *h, dynres_action *a, dynres_result *r) {
  int rc = poll(h, a, r, buf, SMALL);
  if (rc == DYNRES_ERR_BUFFER_TOO_SMALL) {
    CHECK(a->len > SMALL, "too small for %zu bytes?", a->len);
    CHECK(a->len <= BUFCAP, "action of %zu bytes", a->len);
    rc = poll(h, a, r, buf, BUFCAP);
  }
  OK(rc);
  return a->kind != DYNRES_ACTION_NONE;
}

static const char *status_name(int s) {
  static const char *names[] = {"NULL", "ANNOUNCED", "PENDING", "FINALIZED", "ABORTED"};
  return s >= 0 && s <= 4 ? names[s] : "?";
}

static void start_self_query(uint32_t rank) {
  procs[rank].state = SELF_QUERY;
  OK(dynres_client_call_get_res_change(procs[rank].client, ++procs[rank].next_call,
                                       "mpi://SELF", now_ns));
}

static void launch(uint32_t node, const uint8_t *payload, size_t len) {
  for (size_t i = 0; i + 4 <= len; i += 4) {
    uint32_t rank;
    memcpy(&rank, payload + i, 4);
    CHECK(rank < MAXP, "rank %u out of range", rank);
    CHECK(!procs[rank].alive, "rank %u launched twice", rank);
    OK(dynres_client_new(NS, rank, &procs[rank].client));
    procs[rank].node = node;
    procs[rank].alive = 1;
    /* Every process starts like Lst. 6.7: was it added by a change? */
    start_self_query(rank);
  }
}

/* The application side: what each process does when one of its calls completes. */
static void on_done(uint32_t rank, const dynres_action *a, const dynres_result *r) {
  proc *p = &procs[rank];
  switch (p->state) {
  case SELF_QUERY:
    CHECK(r->call == DYNRES_CALL_GET_RES_CHANGE && a->error == DYNRES_OK,
          "rank %u: self query failed", rank);
    if (r->res_change.incl && r->res_change.kind == DYNRES_RC_ADD &&
        r->res_change.status == DYNRES_STATUS_ANNOUNCED) {
      p->state = CONFIRMING;
      OK(dynres_client_call_confirm(p->client, ++p->next_call, r->res_change.delta.name,
                                    1000000000ull, now_ns));
    } else {
      p->state = IDLE;
    }
    break;
  case CONFIRMING:
    CHECK(r->call == DYNRES_CALL_CONFIRM, "rank %u: not a confirm result", rank);
    CHECK(a->error == DYNRES_OK, "rank %u: confirm failed: %s", rank, (const char *)buf);
    copy_name(p->new_pset, r->pset.name);
    p->state = IDLE;
    break;
  case ROOT_QUERY:
    CHECK(r->call == DYNRES_CALL_GET_RES_CHANGE && a->error == DYNRES_OK, "root query");
    CHECK(r->res_change.status == DYNRES_STATUS_ANNOUNCED, "root sees status %s",
          status_name(r->res_change.status));
    root.kind = r->res_change.kind;
    copy_name(root.delta, r->res_change.delta.name);
    /* Phase 2: the application pset becomes app ∪ delta (ADD) or app ∖ delta (SUB). */
    p->state = ROOT_OP;
    OK(dynres_client_call_pset_op(p->client, ++p->next_call,
                                  root.kind == DYNRES_RC_ADD ? DYNRES_OP_UNION
                                                             : DYNRES_OP_DIFFERENCE,
                                  APP_PSET, root.delta, APP_PSET, now_ns));
    break;
  case ROOT_OP:
    CHECK(r->call == DYNRES_CALL_PSET_OP && a->error == DYNRES_OK, "phase 2 failed: %s",
          (const char *)buf);
    CHECK(strcmp(r->pset.name, APP_PSET) == 0, "phase 2 made %s", r->pset.name);
    p->state = IDLE;
    break;
  case ROOT_ACCEPT:
    CHECK(r->call == DYNRES_CALL_ACCEPT, "not an accept result");
    CHECK(a->error == DYNRES_OK, "accept failed: %s", (const char *)buf);
    root.accept_status = r->accept.status;
    root.nremoved = (size_t)r->accept.nremoved;
    CHECK(a->len == root.nremoved * 4, "payload of %zu bytes for %zu ranks", a->len,
          root.nremoved);
    memcpy(root.removed, buf, a->len);
    CHECK(!r->accept.terminate, "the root is never removed");
    p->state = IDLE;
    break;
  default:
    fail("rank %u: unexpected completion in state %d", rank, p->state);
  }
}

/* Runs the machines until none has anything left to do. */
static void pump(void) {
  dynres_action a;
  dynres_result r;
  for (;;) {
    int progress = 0;
    while (next_action(poll_master, master, &a, NULL)) {
      progress = 1;
      switch (a.kind) {
      case DYNRES_ACTION_SEND_TO_DAEMON:
        enqueue(TO_DAEMON_FROM_MASTER, a.node, 0, buf, a.len);
        break;
      case DYNRES_ACTION_STATUS:
        CHECK(nstatuses < 64, "too many statuses");
        copy_name(statuses[nstatuses].delta, buf);
        statuses[nstatuses++].status = a.status;
        printf("toy_runtime: %s is %s\n", (const char *)buf, status_name(a.status));
        break;
      case DYNRES_ACTION_STARTED:
        started_ticket = a.id;
        copy_name(started_delta, buf);
        break;
      case DYNRES_ACTION_REFUSED:
        fail("request %llu refused: %s", (unsigned long long)a.id, (const char *)buf);
        break;
      case DYNRES_ACTION_NODE_ALLOCATED:
        allocated[a.node]++;
        break;
      case DYNRES_ACTION_NODE_RELEASED:
        released[a.node]++;
        break;
      default:
        fail("unexpected master action %d", a.kind);
      }
    }
    for (uint32_t n = 0; n < NODES; n++) {
      while (next_action(poll_daemon, daemons[n], &a, NULL)) {
        progress = 1;
        switch (a.kind) {
        case DYNRES_ACTION_SEND_TO_MASTER:
          enqueue(TO_MASTER, 0, n, buf, a.len);
          break;
        case DYNRES_ACTION_SEND_TO_CLIENT:
          enqueue(TO_CLIENT, a.rank, n, buf, a.len);
          break;
        case DYNRES_ACTION_LAUNCH:
          launch(n, buf, a.len);
          break;
        default:
          fail("unexpected daemon action %d", a.kind);
        }
      }
    }
    for (uint32_t k = 0; k < MAXP; k++) {
      if (!procs[k].alive) continue;
      while (next_action(poll_client, procs[k].client, &a, &r)) {
        progress = 1;
        if (a.kind == DYNRES_ACTION_SEND_REQUEST)
          enqueue(TO_DAEMON_FROM_CLIENT, procs[k].node, k, buf, a.len);
        else if (a.kind == DYNRES_ACTION_DONE)
          on_done(k, &a, &r);
        else
          fail("unexpected client action %d", a.kind);
      }
    }
    if (head) {
      msg *m = head;
      head = m->next;
      if (!head) tail = NULL;
      now_ns += 1000; /* 1 µs a hop */
      delivered++;
      switch (m->kind) {
      case TO_MASTER:
        OK(dynres_master_handle(master, m->src, m->bytes, m->len, now_ns));
        break;
      case TO_DAEMON_FROM_MASTER:
        OK(dynres_daemon_handle_master(daemons[m->dest], m->bytes, m->len, now_ns));
        break;
      case TO_DAEMON_FROM_CLIENT:
        OK(dynres_daemon_handle_client(daemons[m->dest], m->src, m->bytes, m->len, now_ns));
        break;
      case TO_CLIENT:
        CHECK(procs[m->dest].alive, "reply to a dead rank %u", m->dest);
        OK(dynres_client_handle(procs[m->dest].client, m->bytes, m->len, now_ns));
        break;
      }
      free(m->bytes);
      free(m);
      progress = 1;
    }
    if (!progress) return;
  }
}

/* The statuses the master reported for `delta`, in order, as "A,P,F". */
static void status_log(const char *delta, char *out, size_t cap) {
  out[0] = 0;
  for (int i = 0; i < nstatuses; i++) {
    if (strcmp(statuses[i].delta, delta) != 0) continue;
    size_t l = strlen(out);
    snprintf(out + l, cap - l, "%s%s", l ? "," : "", status_name(statuses[i].status));
  }
}

static uint64_t pset_size(const char *pset) {
  dynres_registry *reg;
  dynres_pset_info info;
  OK(dynres_master_registry_copy(master, &reg));
  OK(dynres_registry_info(reg, pset, &info));
  OK(dynres_registry_free(reg));
  return info.size;
}

/* The root adapts to the announced change: query, pset operation, then accept until
 * the change is decided. */
static void root_adapts(void) {
  procs[0].state = ROOT_QUERY;
  OK(dynres_client_call_get_res_change(procs[0].client, ++procs[0].next_call, NULL, now_ns));
  pump();
  CHECK(procs[0].state == IDLE, "root stuck in state %d", procs[0].state);
  for (int tries = 0; tries < 10; tries++) {
    procs[0].state = ROOT_ACCEPT;
    OK(dynres_client_call_accept(procs[0].client, ++procs[0].next_call, root.delta, APP_PSET,
                                 NULL, 0, now_ns));
    pump();
    if (root.accept_status == DYNRES_STATUS_FINALIZED) return;
    CHECK(root.accept_status == DYNRES_STATUS_PENDING, "accept says %s",
          status_name(root.accept_status));
  }
  fail("change %s never finalized", root.delta);
}

static void request(uint64_t ticket, int kind, uint32_t n) {
  dynres_change_request req = {
      .kind = kind, .app = APP, .add = kind == DYNRES_RC_ADD ? n : 0,
      .sub = kind == DYNRES_RC_SUB ? n : 0, .victims = NULL, .nvictims = 0, .bound = NULL};
  OK(dynres_master_request_change(master, ticket, &req, now_ns));
  pump();
  CHECK(started_ticket == ticket, "request %llu did not start", (unsigned long long)ticket);
}

static void add_of_two(void) {
  char log[256];
  request(1, DYNRES_RC_ADD, 2);
  CHECK(strcmp(started_delta, "mpi://rte/app/rc/1") == 0, "delta %s", started_delta);
  CHECK(procs[4].alive && procs[5].alive && !procs[6].alive, "ranks 4 and 5 launched");
  CHECK(procs[4].node == 1 && allocated[1] == 1, "the ADD took node 1 (stack order)");
  CHECK(procs[4].state == CONFIRMING, "rank 4 confirms (state %d)", procs[4].state);
  root_adapts();
  CHECK(root.kind == DYNRES_RC_ADD, "root saw kind %d", root.kind);
  status_log(root.delta, log, sizeof log);
  CHECK(strcmp(log, "ANNOUNCED,PENDING,FINALIZED") == 0, "ADD statuses %s", log);
  for (uint32_t k = 4; k < 6; k++)
    CHECK(strcmp(procs[k].new_pset, APP_PSET) == 0, "rank %u confirmed into '%s'", k,
          procs[k].new_pset);
  int32_t st;
  OK(dynres_master_change_status(master, root.delta, &st));
  CHECK(st == DYNRES_STATUS_FINALIZED, "master says %s", status_name(st));
  CHECK(pset_size(APP_PSET) == 6 && pset_size("mpi://WORLD") == 6, "6 processes after ADD");
  printf("toy_runtime: ADD of 2 %s -> 6 processes (%s)\n", root.delta, log);
}

static void sub_of_two(void) {
  char log[256];
  request(2, DYNRES_RC_SUB, 2);
  CHECK(strcmp(started_delta, "mpi://rte/app/rc/2") == 0, "delta %s", started_delta);
  root_adapts();
  CHECK(root.kind == DYNRES_RC_SUB, "root saw kind %d", root.kind);
  CHECK(root.nremoved == 2 && root.removed[0] + root.removed[1] == 9,
        "ranks 4 and 5 removed (%zu)", root.nremoved);
  /* The removed processes finalize and exit; their daemon reports it. */
  for (size_t i = 0; i < root.nremoved; i++) {
    uint32_t k = root.removed[i];
    OK(dynres_client_free(procs[k].client));
    procs[k].alive = 0;
    OK(dynres_daemon_exited(daemons[procs[k].node], k, now_ns));
  }
  pump();
  status_log(root.delta, log, sizeof log);
  CHECK(strcmp(log, "ANNOUNCED,PENDING,FINALIZED") == 0, "SUB statuses %s", log);
  CHECK(released[1] == 1, "node 1 released once its processes exited");
  CHECK(pset_size(APP_PSET) == 4, "4 processes after SUB");
  dynres_registry *reg;
  int member;
  OK(dynres_master_registry_copy(master, &reg));
  OK(dynres_registry_contains(reg, APP_PSET, 5, &member));
  CHECK(!member, "rank 5 left the application");
  OK(dynres_registry_contains(reg, APP_PSET, 3, &member));
  CHECK(member, "rank 3 stays");
  OK(dynres_registry_free(reg));
  printf("toy_runtime: SUB of 2 %s -> 4 processes (%s)\n", root.delta, log);
}

/* The pset registry on its own: UNION, DIFFERENCE, INTERSECTION, size, membership. */
static void registry_tour(void) {
  dynres_registry *r;
  dynres_app_spec apps[] = {{.name = "a", .nprocs = 6}};
  uint32_t evens[] = {0, 2, 4}, lows[] = {0, 1, 2};
  dynres_pset_name res;
  dynres_pset_info info;
  uint32_t members[8];
  size_t n;
  int member;
  OK(dynres_registry_new(&r));
  OK(dynres_registry_start_job(r, NS, apps, 1));
  OK(dynres_registry_define(r, "mpi://rte/a/evens", evens, 3));
  OK(dynres_registry_define(r, "mpi://rte/a/lows", lows, 3));
  OK(dynres_registry_op(r, DYNRES_OP_UNION, "mpi://rte/a/evens", "mpi://rte/a/lows",
                        "mpi://rte/a/u", NULL, 0, &res));
  OK(dynres_registry_info(r, res.name, &info));
  CHECK(info.size == 4, "|evens ∪ lows| = %llu", (unsigned long long)info.size);
  OK(dynres_registry_op(r, DYNRES_OP_DIFFERENCE, "mpi://rte/a/evens", "mpi://rte/a/lows",
                        "mpi://rte/a/d", NULL, 0, &res));
  OK(dynres_registry_members(r, res.name, members, 8, &n));
  CHECK(n == 1 && members[0] == 4, "evens ∖ lows = {4}");
  /* An application process writes in its own domain; the name is generated. */
  OK(dynres_registry_op(r, DYNRES_OP_INTERSECTION, "mpi://rte/a/evens", "mpi://rte/a/lows",
                        NULL, "a", 0, &res));
  CHECK(strncmp(res.name, "mpi://app/a/", 12) == 0, "generated %s", res.name);
  OK(dynres_registry_contains(r, res.name, 2, &member));
  CHECK(member, "2 is in evens ∩ lows");
  OK(dynres_registry_contains(r, res.name, 1, &member));
  CHECK(!member, "1 is not");
  /* Too small: the count needed, nothing lost. */
  CHECK(dynres_registry_members(r, APP_PSET, members, 1, &n) == DYNRES_ERR_RC_PSET,
        "no such pset here: %s", dynres_last_error());
  CHECK(dynres_registry_members(r, "mpi://app/a", members, 2, &n) ==
            DYNRES_ERR_BUFFER_TOO_SMALL && n == 6,
        "too small: n = %zu", n);
  /* A refused request changes nothing (PSET-40) and says why. */
  CHECK(dynres_registry_op(r, DYNRES_OP_UNION, "mpi://rte/a/evens", "mpi://rte/a/nope",
                           NULL, NULL, 0, &res) == DYNRES_ERR_RC_PSET,
        "unknown pset refused");
  CHECK(strstr(dynres_last_error(), "nope") != NULL, "message names it: %s",
        dynres_last_error());
  CHECK(dynres_registry_info(r, "not a name", &info) == DYNRES_ERR_BAD_NAME, "bad name");
  OK(dynres_registry_free(r));
  printf("toy_runtime: registry ok\n");
}

/* NULL pointers and malformed frames are error codes, never crashes. */
static void boundary_errors(void) {
  uint8_t junk[] = {'D', 'R', 1, 0x02, 0x10, 0, 0, 0, 2, 0xff, 0xff};
  dynres_action a;
  size_t len;
  CHECK(dynres_master_handle(NULL, 0, junk, sizeof junk, now_ns) == DYNRES_ERR_NULL, "null");
  CHECK(dynres_master_poll_output(master, NULL, buf, BUFCAP) == DYNRES_ERR_NULL, "null");
  CHECK(dynres_master_handle(master, 0, junk, sizeof junk, now_ns) ==
            DYNRES_ERR_WIRE_TRUNCATED,
        "truncated forward: %s", dynres_error_name(dynres_master_handle(master, 0, junk,
                                                                         sizeof junk, now_ns)));
  junk[0] = 'X';
  CHECK(dynres_daemon_handle_master(daemons[0], junk, sizeof junk, now_ns) ==
            DYNRES_ERR_WIRE_BAD_MAGIC,
        "bad magic");
  CHECK(dynres_frame_len(junk, sizeof junk, &len) == DYNRES_ERR_WIRE_BAD_MAGIC, "bad magic");
  junk[0] = 'D';
  OK(dynres_frame_len(junk, sizeof junk, &len));
  CHECK(len == 11, "frame of %zu bytes", len);
  CHECK(dynres_client_handle(procs[0].client, NULL, 3, now_ns) == DYNRES_ERR_NULL, "null");
  CHECK(dynres_client_call_fence(procs[0].client, 99, "mpi://nope", 1, now_ns) ==
            DYNRES_ERR_BAD_NAME,
        "bad pset name");
  CHECK(dynres_master_free(NULL) == DYNRES_OK, "free(NULL) is a no-op");
  /* Nothing of that reached the machines. */
  CHECK(dynres_master_poll_output(master, &a, buf, BUFCAP) == DYNRES_OK &&
            a.kind == DYNRES_ACTION_NONE,
        "the master stayed idle");
  printf("toy_runtime: boundary errors ok\n");
}

int main(void) {
  snprintf(example_tag, sizeof example_tag, "toy_runtime");
  dynres_node_spec nodes[NODES] = {{.name = "n0", .slots = SLOTS}, {.name = "n1", .slots = SLOTS}};
  dynres_app_spec apps[] = {{.name = APP, .nprocs = START}};
  dynres_master_config cfg = {.job_namespace = NS, .nodes = nodes, .nnodes = NODES,
                              .apps = apps, .napps = 1,
                              .change_timeout_ns = 10ull * 1000000000ull,
                              .grace_ns = 1000000000ull, .max_queued = 4};
  OK(dynres_master_new(&cfg, &master));
  for (uint32_t n = 0; n < NODES; n++) OK(dynres_daemon_new(n, NS, &daemons[n]));
  pump();
  for (uint32_t k = 0; k < START; k++)
    CHECK(procs[k].alive && procs[k].state == IDLE, "rank %u started", k);
  CHECK(pset_size(APP_PSET) == START, "the job starts with %d processes", START);

  add_of_two();
  sub_of_two();

  uint64_t deadline;
  int armed;
  OK(dynres_master_poll_timeout(master, &deadline, &armed));
  if (armed) {
    /* A timer is left (the decided change's bookkeeping): fire it when due. */
    CHECK(deadline > now_ns, "deadline in the future");
    now_ns = deadline;
    OK(dynres_master_timeout(master, now_ns));
    pump();
  }

  registry_tour();
  boundary_errors();

  for (uint32_t k = 0; k < MAXP; k++)
    if (procs[k].alive) OK(dynres_client_free(procs[k].client));
  for (uint32_t n = 0; n < NODES; n++) OK(dynres_daemon_free(daemons[n]));
  OK(dynres_master_free(master));
  printf("toy_runtime: %lu frames delivered\n", delivered);
  printf("toy_runtime: ok\n");
  return 0;
}
