/* A stranger on the node: a bare PMIx client that tries to connect to a job's PMIx
 * server with the namespace and rank it was given in its environment. Prints
 * "joined" or "refused <status>". */
#include <pmix.h>
#include <stdio.h>

int main(void)
{
    pmix_proc_t me;
    pmix_status_t rc = PMIx_Init(&me, NULL, 0);
    if (rc == PMIX_SUCCESS) {
        printf("joined %s %u\n", me.nspace, me.rank);
        PMIx_Finalize(NULL, 0);
        return 0;
    }
    printf("refused %s\n", PMIx_Error_string(rc));
    return 0;
}
