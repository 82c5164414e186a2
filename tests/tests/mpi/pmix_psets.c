/* A bare PMIx client of a dynres job: asks its server for the psets (PMIS-15) and
 * prints "psets N", "names A,B,...", and the members of mpi://WORLD as
 * "world NSPACE:RANK ..." (each member's namespace checked against its own). */
#include <pmix.h>
#include <stdio.h>
#include <string.h>

int main(void)
{
    pmix_proc_t me;
    if (PMIx_Init(&me, NULL, 0) != PMIX_SUCCESS) {
        printf("init failed\n");
        return 1;
    }
    pmix_query_t q[3];
    pmix_status_t rc;
    PMIX_QUERY_CONSTRUCT(&q[0]);
    PMIX_ARGV_APPEND(rc, q[0].keys, PMIX_QUERY_NUM_PSETS);
    PMIX_QUERY_CONSTRUCT(&q[1]);
    PMIX_ARGV_APPEND(rc, q[1].keys, PMIX_QUERY_PSET_NAMES);
    PMIX_QUERY_CONSTRUCT(&q[2]);
    PMIX_ARGV_APPEND(rc, q[2].keys, PMIX_QUERY_PSET_MEMBERSHIP);
    PMIX_INFO_CREATE(q[2].qualifiers, 1);
    q[2].nqual = 1;
    PMIX_INFO_LOAD(&q[2].qualifiers[0], PMIX_PSET_NAME, "mpi://WORLD", PMIX_STRING);
    pmix_info_t *results = NULL;
    size_t n = 0;
    rc = PMIx_Query_info(q, 3, &results, &n);
    if (rc != PMIX_SUCCESS) {
        printf("query failed %s\n", PMIx_Error_string(rc));
        PMIx_Finalize(NULL, 0);
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        pmix_info_t *r = &results[i];
        if (PMIX_CHECK_KEY(r, PMIX_QUERY_NUM_PSETS) && r->value.type == PMIX_SIZE) {
            printf("rank %u psets %zu\n", me.rank, r->value.data.size);
        } else if (PMIX_CHECK_KEY(r, PMIX_QUERY_PSET_NAMES) && r->value.type == PMIX_STRING) {
            printf("rank %u names %s\n", me.rank, r->value.data.string);
        } else if (PMIX_CHECK_KEY(r, PMIX_QUERY_PSET_MEMBERSHIP)
                   && r->value.type == PMIX_DATA_ARRAY
                   && r->value.data.darray->type == PMIX_PROC) {
            pmix_proc_t *p = (pmix_proc_t *) r->value.data.darray->array;
            printf("rank %u world", me.rank);
            for (size_t k = 0; k < r->value.data.darray->size; k++) {
                printf(" %s:%u", PMIX_CHECK_NSPACE(p[k].nspace, me.nspace) ? "own" : p[k].nspace,
                       p[k].rank);
            }
            printf("\n");
        } else {
            printf("rank %u unexpected %s\n", me.rank, r->key);
        }
    }
    PMIx_Finalize(NULL, 0);
    return 0;
}
