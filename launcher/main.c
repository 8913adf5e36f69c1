/* main.c: the `terarec` program: everything happens in terarec_main. */
#include "terarec.h"

int main(int argc, char **argv)
{
    return terarec_main(argc, argv);
}
