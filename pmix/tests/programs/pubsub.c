/* Rank 0 publishes a port name under a service name; after a barrier, rank 1 looks it
 * up and prints what it got (Open MPI's MPI_Lookup_name does not wait for the name). */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    int rank, rc;
    char port[MPI_MAX_PORT_NAME];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    if (rank == 0) {
        rc = MPI_Publish_name("dynres-svc", MPI_INFO_NULL, "dynres-port-42");
        printf("rank 0 published rc=%d\n", rc);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 1) {
        memset(port, 0, sizeof(port));
        rc = MPI_Lookup_name("dynres-svc", MPI_INFO_NULL, port);
        printf("rank 1 looked up rc=%d port=%s\n", rc, port);
    }
    fflush(stdout);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
}
