#include <mpi.h>
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv) {
    int rank;
    char port[MPI_MAX_PORT_NAME] = "", seen[MPI_MAX_PORT_NAME] = "";
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    if (rank == 0) {
        if (MPI_Open_port(MPI_INFO_NULL, port) != MPI_SUCCESS || !port[0]) return 2;
        if (MPI_Publish_name("dynres-svc", MPI_INFO_NULL, port) != MPI_SUCCESS) return 3;
    }
    MPI_Bcast(port, MPI_MAX_PORT_NAME, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (rank == 1) {
        int rc = MPI_Lookup_name("dynres-svc", MPI_INFO_NULL, seen);
        printf("lookup rc=%d same=%d\n", rc, rc == MPI_SUCCESS && port[0] && strcmp(seen, port) == 0);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) MPI_Unpublish_name("dynres-svc", MPI_INFO_NULL, port);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 1) {
        int rc = MPI_Lookup_name("dynres-svc", MPI_INFO_NULL, seen);
        printf("after unpublish found=%d\n", rc == MPI_SUCCESS);
    }
    if (rank == 0) MPI_Close_port(port);
    MPI_Finalize();
    return 0;
}
