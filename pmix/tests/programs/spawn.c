/* Parent: spawns 2 copies of itself, sends each child its number over the
 * intercommunicator and receives it back doubled. Child: gets its parent, answers. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    MPI_Comm parent, children;
    int rank, size, i, v;
    MPI_Init(&argc, &argv);
    MPI_Comm_get_parent(&parent);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (parent == MPI_COMM_NULL) {
        int errs[2];
        MPI_Comm_spawn(argv[0], MPI_ARGV_NULL, 2, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &children, errs);
        for (i = 0; i < 2; i++) {
            MPI_Send(&i, 1, MPI_INT, i, 0, children);
            MPI_Recv(&v, 1, MPI_INT, i, 1, children, MPI_STATUS_IGNORE);
            printf("parent got %d from child %d\n", v, i);
        }
        fflush(stdout);
        MPI_Comm_disconnect(&children);
    } else {
        MPI_Recv(&v, 1, MPI_INT, 0, 0, parent, MPI_STATUS_IGNORE);
        v *= 2;
        MPI_Send(&v, 1, MPI_INT, 0, 1, parent);
        printf("child rank=%d size=%d answered %d\n", rank, size, v);
        fflush(stdout);
        MPI_Comm_disconnect(&parent);
    }
    MPI_Finalize();
    return 0;
}
