/* A bare PMIx client (built against the system's libpmix): puts its rank under a key,
 * commits, fences with data collection, and reads the key of every peer on its node
 * back. The job's last rank is on another node and never started: its data is
 * asked for (with a timeout) and must fail, not hang. */
#include <pmix.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void)
{
    pmix_proc_t me, peer;
    pmix_value_t val, *got;
    pmix_info_t info;
    bool collect = true;
    pmix_status_t rc;
    uint32_t size, r;
    int bad = 0, timeout = 10;
    char *peers, *tok;

    if (PMIX_SUCCESS != (rc = PMIx_Init(&me, NULL, 0))) {
        fprintf(stderr, "PMIx_Init: %s\n", PMIx_Error_string(rc));
        return 1;
    }
    PMIX_LOAD_PROCID(&peer, me.nspace, PMIX_RANK_WILDCARD);
    if (PMIX_SUCCESS != (rc = PMIx_Get(&peer, PMIX_JOB_SIZE, NULL, 0, &got))) {
        fprintf(stderr, "get job size: %s\n", PMIx_Error_string(rc));
        return 1;
    }
    size = got->data.uint32;
    PMIX_VALUE_RELEASE(got);
    val.type = PMIX_UINT32;
    val.data.uint32 = 100 + me.rank;
    PMIx_Put(PMIX_GLOBAL, "dynres.test.key", &val);
    PMIx_Commit();
    PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    if (PMIX_SUCCESS != (rc = PMIx_Fence(&peer, 1, &info, 1))) {
        fprintf(stderr, "fence: %s\n", PMIx_Error_string(rc));
        return 1;
    }
    PMIX_LOAD_PROCID(&peer, me.nspace, PMIX_RANK_WILDCARD);
    if (PMIX_SUCCESS != (rc = PMIx_Get(&peer, PMIX_LOCAL_PEERS, NULL, 0, &got))) {
        fprintf(stderr, "get local peers: %s\n", PMIx_Error_string(rc));
        return 1;
    }
    peers = strdup(got->data.string);
    PMIX_VALUE_RELEASE(got);
    for (tok = strtok(peers, ","); NULL != tok; tok = strtok(NULL, ",")) {
        r = (uint32_t)strtoul(tok, NULL, 10);
        PMIX_LOAD_PROCID(&peer, me.nspace, r);
        rc = PMIx_Get(&peer, "dynres.test.key", NULL, 0, &got);
        if (PMIX_SUCCESS != rc || got->data.uint32 != 100 + r) {
            fprintf(stderr, "rank %u: get of rank %u failed: %s\n", me.rank, r, PMIx_Error_string(rc));
            bad = 1;
        } else {
            PMIX_VALUE_RELEASE(got);
        }
    }
    /* the remote rank's data: the server asks the host (direct modex) */
    PMIX_LOAD_PROCID(&peer, me.nspace, size - 1);
    PMIX_INFO_LOAD(&info, PMIX_TIMEOUT, &timeout, PMIX_INT);
    rc = PMIx_Get(&peer, "dynres.test.key", &info, 1, &got);
    printf("rank %u remote get ok=%d\n", me.rank, PMIX_SUCCESS == rc);
    printf("pmix rank=%u size=%u fence ok=%d\n", me.rank, size, !bad);
    fflush(stdout);
    PMIx_Finalize(NULL, 0);
    return bad;
}
