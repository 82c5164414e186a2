/* A PMI-2 client on Slurm's libpmi2 (spec/pmi.md §3.1): what MPI libraries built
 * against it ask at start-up, each answer checked. Modes:
 *   (none)  init, job id, process mapping, put/fence/get of every rank's key,
 *           publish/lookup/unpublish, finalize
 *   spawn   rank 0 spawns 2 children of this program with a pre-put key; each child
 *           checks it was spawned, reads the key and fences with its sibling */
#include <slurm/pmi2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "pmi2_hello: " __VA_ARGS__); \
    fprintf(stderr, " (line %d)\n", __LINE__); exit(3); } } while (0)

static void fence_and_check(int rank, int size, const char *jobid) {
    char key[64], val[128], got[1024];
    int len = 0;
    snprintf(key, sizeof key, "card-%d", rank);
    snprintf(val, sizeof val, "rank;%d=v", rank);
    CHECK(PMI2_KVS_Put(key, val) == PMI2_SUCCESS, "put");
    CHECK(PMI2_KVS_Fence() == PMI2_SUCCESS, "fence");
    for (int r = 0; r < size; r++) {
        snprintf(key, sizeof key, "card-%d", r);
        snprintf(val, sizeof val, "rank;%d=v", r);
        CHECK(PMI2_KVS_Get(jobid, r, key, got, sizeof got, &len) == PMI2_SUCCESS, "get %s", key);
        CHECK(strcmp(got, val) == 0 && len == (int)strlen(val), "get %s: %s", key, got);
    }
}

int main(int argc, char **argv) {
    int spawned = -1, size = -1, rank = -1, appnum = -1, found = 0;
    char jobid[256], map[1024], port[256];
    CHECK(PMI2_Init(&spawned, &size, &rank, &appnum) == PMI2_SUCCESS, "init");
    CHECK(rank == atoi(getenv("PMI_RANK")) && size == atoi(getenv("PMI_SIZE")),
          "rank %d size %d", rank, size);
    CHECK(PMI2_Job_GetId(jobid, sizeof jobid) == PMI2_SUCCESS, "job id");
    if (spawned) {
        /* A spawn's child: its spawner's pre-put key, then a fence with its siblings. */
        char got[1024];
        int len = 0;
        CHECK(PMI2_KVS_Get(NULL, PMI2_ID_NULL, "PARENT_KEY", got, sizeof got, &len) == PMI2_SUCCESS,
              "preput key");
        CHECK(strcmp(got, "from;parent") == 0, "preput %s", got);
        fence_and_check(rank, size, jobid);
        printf("child rank=%d size=%d appnum=%d spawned=%d preput=%s\n", rank, size, appnum,
               spawned, got);
        fflush(stdout);
        CHECK(PMI2_Finalize() == PMI2_SUCCESS, "finalize");
        return 0;
    }
    CHECK(PMI2_Info_GetJobAttr("PMI_process_mapping", map, sizeof map, &found) == PMI2_SUCCESS,
          "mapping");
    if (argc > 1 && strcmp(argv[1], "spawn") == 0) {
        if (rank == 0) {
            const char *cmds[1] = {argv[0]};
            int argcs[1] = {0}, maxprocs[1] = {2}, errors[2] = {-1, -1};
            const char **argvs[1] = {NULL};
            struct MPID_Info pp = {.key = "PARENT_KEY", .value = "from;parent"};
            const struct MPID_Info *ppv[1] = {&pp};
            char kids[256] = "";
            int rc = PMI2_Job_Spawn(1, cmds, argcs, argvs, maxprocs, NULL, NULL, 1, ppv, kids,
                                    sizeof kids, errors);
            CHECK(rc == PMI2_SUCCESS, "spawn rc %d", rc);
            printf("parent spawned jobid=%s errors=%d,%d\n", kids, errors[0], errors[1]);
        }
        CHECK(PMI2_Finalize() == PMI2_SUCCESS, "finalize");
        return 0;
    }
    fence_and_check(rank, size, jobid);
    /* Names: rank 0 publishes before the fence, the others look it up after. */
    if (rank == 0)
        CHECK(PMI2_Nameserv_publish("pmi2-svc", NULL, "port;0") == PMI2_SUCCESS, "publish");
    CHECK(PMI2_KVS_Fence() == PMI2_SUCCESS, "fence 2");
    CHECK(PMI2_Nameserv_lookup("pmi2-svc", NULL, port, sizeof port) == PMI2_SUCCESS, "lookup");
    CHECK(strcmp(port, "port;0") == 0, "lookup %s", port);
    CHECK(PMI2_KVS_Fence() == PMI2_SUCCESS, "fence 3");
    if (rank == 0) {
        CHECK(PMI2_Nameserv_unpublish("pmi2-svc", NULL) == PMI2_SUCCESS, "unpublish");
        CHECK(PMI2_Nameserv_lookup("pmi2-svc", NULL, port, sizeof port) != PMI2_SUCCESS,
              "lookup after unpublish");
    }
    printf("rank=%d size=%d appnum=%d spawned=%d jobid=%s mapping=%s found=%d kvs=ok names=ok\n",
           rank, size, appnum, spawned, jobid, found ? map : "-", found);
    fflush(stdout);
    CHECK(PMI2_Finalize() == PMI2_SUCCESS, "finalize");
    return 0;
}
