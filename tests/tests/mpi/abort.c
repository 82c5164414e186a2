#include <mpi.h>
#include <signal.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    int rank;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 1) {
        if (argc > 1) raise(SIGKILL);
        MPI_Abort(MPI_COMM_WORLD, 7);
    }
    /* The others wait for a message that never comes: the runtime must end them. */
    int x;
    MPI_Recv(&x, 1, MPI_INT, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Finalize();
    return 0;
}
