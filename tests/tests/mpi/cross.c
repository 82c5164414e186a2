#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
/* Two jobs connect: `server WHERE [TMP]` accepts, `client WHERE` connects. WHERE is a
 * file the port travels in (written to TMP, then renamed), or `name:SERVICE`: the
 * port is published under SERVICE and looked up (the jobs share a data server). */
int main(int argc, char **argv) {
    char port[MPI_MAX_PORT_NAME] = "";
    MPI_Comm inter;
    int rank, v = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const char *service = strncmp(argv[2], "name:", 5) == 0 ? argv[2] + 5 : NULL;
    if (strcmp(argv[1], "server") == 0) {
        if (rank == 0) {
            if (MPI_Open_port(MPI_INFO_NULL, port) != MPI_SUCCESS) return 2;
            if (service) {
                if (MPI_Publish_name(service, MPI_INFO_NULL, port) != MPI_SUCCESS) return 3;
            } else {
                FILE *f = fopen(argv[3], "w"); fputs(port, f); fclose(f);
                rename(argv[3], argv[2]);
            }
        }
        MPI_Comm_accept(port, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &inter);
        if (rank == 0) {
            v = 42;
            MPI_Send(&v, 1, MPI_INT, 0, 0, inter);
            if (service && MPI_Unpublish_name(service, MPI_INFO_NULL, port) != MPI_SUCCESS) return 4;
        }
    } else {
        if (rank == 0) {
            if (service) {
                /* The server may not have published yet: ask again, for up to 60 s. */
                MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
                int tries = 0;
                while (MPI_Lookup_name(service, MPI_INFO_NULL, port) != MPI_SUCCESS) {
                    if (++tries > 6000) return 5;
                    usleep(10000);
                }
            } else {
                FILE *f;
                while (!(f = fopen(argv[2], "r"))) usleep(10000);
                fgets(port, sizeof port, f); fclose(f);
            }
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
