#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {
    char port[MPI_MAX_PORT_NAME] = "";
    MPI_Comm inter;
    int rank, v = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (strcmp(argv[1], "server") == 0) {
        if (rank == 0) {
            if (MPI_Open_port(MPI_INFO_NULL, port) != MPI_SUCCESS) return 2;
            FILE *f = fopen(argv[3], "w"); fputs(port, f); fclose(f);
            rename(argv[3], argv[2]);
        }
        MPI_Comm_accept(port, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &inter);
        if (rank == 0) { v = 42; MPI_Send(&v, 1, MPI_INT, 0, 0, inter); }
    } else {
        if (rank == 0) {
            FILE *f;
            while (!(f = fopen(argv[2], "r"))) usleep(10000);
            fgets(port, sizeof port, f); fclose(f);
        }
        MPI_Comm_connect(port, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &inter);
        if (rank == 0) MPI_Recv(&v, 1, MPI_INT, 0, 0, inter, MPI_STATUS_IGNORE);
    }
    int rsize;
    MPI_Comm_remote_size(inter, &rsize);
    printf("%s rank=%d remote=%d v=%d\n", argv[1], rank, rsize, v);
    MPI_Comm_disconnect(&inter);
    MPI_Finalize();
    return 0;
}
