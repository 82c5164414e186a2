#include <mpi.h>
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv) {
    MPI_Comm parent, inter, merged;
    int rank, size, msize;
    /* A child of `childdies` fails before it ever reaches its MPI library. */
    if (argc > 1 && strcmp(argv[1], "die-now") == 0)
        return 3;
    MPI_Init(&argc, &argv);
    /* A child of `childdieslate` fails after its MPI library connected it. */
    if (argc > 1 && strcmp(argv[1], "die-late") == 0)
        return 3;
    MPI_Comm_get_parent(&parent);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (parent == MPI_COMM_NULL) {
        int errs[64];
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        int rc;
        if (strcmp(argv[1], "multiple") == 0) {
            char *cmds[2] = {argv[0], argv[0]};
            int n[2] = {1, 2};
            MPI_Info infos[2] = {MPI_INFO_NULL, MPI_INFO_NULL};
            rc = MPI_Comm_spawn_multiple(2, cmds, MPI_ARGVS_NULL, n, infos, 0, MPI_COMM_WORLD, &inter, errs);
        } else if (strcmp(argv[1], "childdies") == 0 || strcmp(argv[1], "childdieslate") == 0) {
            char *args[2] = {strcmp(argv[1], "childdies") == 0 ? "die-now" : "die-late", NULL};
            rc = MPI_Comm_spawn(argv[0], args, 2, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &inter, errs);
        } else {
            int n = strcmp(argv[1], "noslots") == 0 ? 64 : 2;
            rc = MPI_Comm_spawn(argv[0], MPI_ARGV_NULL, n, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &inter, errs);
        }
        if (rc != MPI_SUCCESS) {
            printf("parent rank=%d spawn refused\n", rank);
            MPI_Finalize();
            return 0;
        }
        MPI_Intercomm_merge(inter, 0, &merged);
    } else {
        MPI_Intercomm_merge(parent, 1, &merged);
    }
    MPI_Comm_size(merged, &msize);
    int one = 1, sum = 0;
    MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, merged);
    printf("%s rank=%d of %d merged=%d sum=%d\n", parent == MPI_COMM_NULL ? "parent" : "child", rank, size, msize, sum);
    MPI_Comm_free(&merged);
    MPI_Finalize();
    return 0;
}
