/* Parent job (2 ranks): spawns 2 copies of itself; parent rank 0 sends each child its
 * number over the intercommunicator and receives it back doubled. Child: gets its
 * parent, answers. Errors are returned (and printed), not fatal. */
#include <mpi.h>
#include <stdio.h>
static void chk(const char*w,int rc){char s[MPI_MAX_ERROR_STRING];int l;if(rc!=MPI_SUCCESS){MPI_Error_string(rc,s,&l);fprintf(stderr,"%s failed rc=%d %s\n",w,rc,s);fflush(stderr);}}
int main(int argc, char **argv){
    MPI_Comm parent, children; int rank, size, i, v, rc;
    MPI_Init(&argc, &argv);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    MPI_Comm_get_parent(&parent);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank); MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (parent == MPI_COMM_NULL) {
        int errs[2];
        rc = MPI_Comm_spawn(argv[0], MPI_ARGV_NULL, 2, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &children, errs);
        chk("spawn", rc); fprintf(stderr,"spawn rc=%d\n",rc);
        if (rc) return 3;
        MPI_Comm_set_errhandler(children, MPI_ERRORS_RETURN);
        for (i = 0; rank == 0 && i < 2; i++) {
            chk("send",MPI_Send(&i, 1, MPI_INT, i, 0, children));
            chk("recv",MPI_Recv(&v, 1, MPI_INT, i, 1, children, MPI_STATUS_IGNORE));
            printf("parent got %d from child %d\n", v, i);
        }
        printf("parent rank=%d size=%d done\n", rank, size); fflush(stdout);
        MPI_Comm_disconnect(&children);
    } else {
        MPI_Recv(&v, 1, MPI_INT, 0, 0, parent, MPI_STATUS_IGNORE);
        v *= 2; MPI_Send(&v, 1, MPI_INT, 0, 1, parent);
        printf("child rank=%d size=%d answered %d\n", rank, size, v); fflush(stdout);
        MPI_Comm_disconnect(&parent);
    }
    MPI_Finalize(); return 0;
}
