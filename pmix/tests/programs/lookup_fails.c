/* One rank looks up a name that the launcher will never answer: the call must
 * return an error, not hang. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    int rc;
    char port[MPI_MAX_PORT_NAME];
    MPI_Init(&argc, &argv);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    memset(port, 0, sizeof(port));
    rc = MPI_Lookup_name("dynres-never", MPI_INFO_NULL, port);
    printf("lookup rc=%d success=%d\n", rc, rc == MPI_SUCCESS);
    fflush(stdout);
    MPI_Finalize();
    return 0;
}
