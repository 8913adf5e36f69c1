/* terarec.h: the `terarec` front end: a git-style table of subcommands. Each
 * subcommand is a function taking the arguments after its name. */
#ifndef TR_TERAREC_H
#define TR_TERAREC_H

#ifdef __cplusplus
extern "C" {
#endif

/* Runs `terarec ARGS...` (argv[0] is the program name) and returns the process
 * exit status: 0 success, 2 bad usage or input, 1 other failure. */
int terarec_main(int argc, char **argv);

#ifdef __cplusplus
}
#endif
#endif
