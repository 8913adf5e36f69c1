/* test_elastic_slots.c: the slots of an elastic run (launcher/elastic_slots.h):
 * --elastic's MIN[:MAX] in workers or nodes and its bad forms, MIN and MAX in slots
 * of several workers, a lost slot resting and coming back, left out for good after
 * max_failures, a node down and answering again, the next world (first usable
 * slots up to MAX, none below MIN), ranks to slots, host names to nodes. */
#include <stdio.h>
#include <string.h>

#include "../../../common/check.h"
#include "../../../common/harness.h"
#include "../../../launcher/elastic_slots.h"

static void spec_forms(void)
{
    struct elastic_spec sp;
    char err[256];
    TH_EQ_ST(elastic_spec_parse("2", &sp, err, sizeof err), TR_OK);
    TH_CHECK(sp.min == 2 && sp.max == 0 && sp.unit == ELASTIC_WORKERS);
    TH_EQ_ST(elastic_spec_parse("2:4", &sp, err, sizeof err), TR_OK);
    TH_CHECK(sp.min == 2 && sp.max == 4 && sp.unit == ELASTIC_WORKERS);
    TH_EQ_ST(elastic_spec_parse("3n:8n", &sp, err, sizeof err), TR_OK);
    TH_CHECK(sp.min == 3 && sp.max == 8 && sp.unit == ELASTIC_NODES);
    TH_EQ_ST(elastic_spec_parse("1n", &sp, err, sizeof err), TR_OK);
    TH_CHECK(sp.min == 1 && sp.unit == ELASTIC_NODES);
    TH_EQ_ST(elastic_spec_parse("4:4", &sp, err, sizeof err), TR_OK);
    const char *const bad[] = {"", "0", "-1", "2:", ":4", "a", "2x", "2:4:6", "2 :4", "2:1n", "99999999999", "2.5"};
    for (size_t i = 0; i < TR_ARRAY_SIZE(bad); i++) {
        err[0] = 0;
        TH_CHECKF(elastic_spec_parse(bad[i], &sp, err, sizeof err) == TR_ERR_ARG && err[0],
                  "'%s' accepted (or no reason given)", bad[i]);
    }
    TH_EQ_ST(elastic_spec_parse("3:2", &sp, err, sizeof err), TR_ERR_ARG);
    TH_EQ_STR(err, "MAX 2 is less than MIN 3");
    TH_EQ_ST(elastic_spec_parse("2n:4", &sp, err, sizeof err), TR_ERR_ARG);
    TH_CHECK(strstr(err, "mixes workers and nodes") != NULL);
    TH_EQ_ST(elastic_spec_parse(NULL, &sp, err, sizeof err), TR_ERR_ARG);
}

static void spec_in_slots(void)
{
    struct elastic_spec sp;
    struct elastic_slots s;
    char err[256];
    /* 8 workers a node: MIN 9 workers needs 2 nodes, MAX 20 allows 2 */
    TH_EQ_ST(elastic_spec_parse("9:20", &sp, err, sizeof err), TR_OK);
    TH_EQ_ST_REQ(elastic_slots_init(&s, 4, NULL, 8, &sp, 3, err, sizeof err), TR_OK);
    TH_EQ(s.min_slots, 2);
    TH_EQ(s.max_slots, 2);
    TH_EQ(elastic_slots_choose(&s), 2);
    elastic_slots_release(&s);
    /* nodes, MAX past the allocation: the allocation's */
    TH_EQ_ST(elastic_spec_parse("2n:9n", &sp, err, sizeof err), TR_OK);
    TH_EQ_ST_REQ(elastic_slots_init(&s, 4, NULL, 8, &sp, 3, err, sizeof err), TR_OK);
    TH_CHECK(s.min_slots == 2 && s.max_slots == 4);
    elastic_slots_release(&s);
    /* MIN past the slots; MAX below one node */
    TH_EQ_ST(elastic_spec_parse("5", &sp, err, sizeof err), TR_OK);
    TH_EQ_ST(elastic_slots_init(&s, 4, NULL, 1, &sp, 3, err, sizeof err), TR_ERR_ARG);
    TH_EQ_STR(err, "MIN 5 workers needs 5 worker slots, and the run has 4");
    TH_EQ_ST(elastic_spec_parse("1:4", &sp, err, sizeof err), TR_OK);
    TH_EQ_ST(elastic_slots_init(&s, 4, NULL, 8, &sp, 3, err, sizeof err), TR_ERR_ARG);
    TH_CHECK(strstr(err, "less than one node's 8") != NULL);
}

static void lost_rests_and_comes_back(void)
{
    struct elastic_spec sp;
    struct elastic_slots s;
    char err[256], names[256];
    TH_EQ_ST(elastic_spec_parse("2", &sp, err, sizeof err), TR_OK);
    TH_EQ_ST_REQ(elastic_slots_init(&s, 4, NULL, 1, &sp, 3, err, sizeof err), TR_OK);
    TH_EQ(elastic_slots_choose(&s), 4);
    TH_EQ_STR(s.v[2].name, "slot 2");
    TH_EQ(elastic_slots_of_rank(&s, 1), 1);
    TH_EQ(elastic_slots_lost(&s, 1, 130), ELASTIC_RESTING);
    TH_EQ(elastic_slots_choose(&s), 3);
    TH_EQ_STR(elastic_slots_names(&s, -1, ", ", names, sizeof names), "slot 0, slot 2, slot 3");
    TH_EQ(elastic_slots_of_rank(&s, 1), 2); /* the ranks fill the world's slots in order */
    TH_EQ(elastic_slots_of_rank(&s, 3), -1);
    TH_CHECK(!elastic_slots_can_grow(&s));
    TH_EQ(elastic_slots_ready(&s, 150, 50), 0); /* 20 steps since: not yet */
    TH_EQ(elastic_slots_ready(&s, 180, 50), 1);
    TH_CHECK(elastic_slots_can_grow(&s));
    TH_EQ(elastic_slots_choose(&s), 4);
    /* three times: left out for good */
    TH_EQ(elastic_slots_lost(&s, 1, 200), ELASTIC_RESTING);
    elastic_slots_ready(&s, 200, 0);
    TH_EQ(elastic_slots_lost(&s, 1, 300), ELASTIC_OUT);
    TH_EQ(elastic_slots_ready(&s, 1000000, 0), 0);
    elastic_slots_answer(&s, 1, 1, 400); /* answering does not bring it back */
    TH_EQ(s.v[1].state, ELASTIC_OUT);
    TH_EQ(s.v[1].failures, 3);
    TH_EQ(elastic_slots_out(&s), 1);
    TH_EQ_STR(elastic_slots_names(&s, ELASTIC_OUT, ",", names, sizeof names), "slot 1");
    TH_EQ(elastic_slots_choose(&s), 3);
    /* down to MIN, then below it: nothing changes */
    elastic_slots_lost(&s, 0, 500);
    TH_EQ(elastic_slots_choose(&s), 2);
    elastic_slots_lost(&s, 2, 600);
    TH_EQ(elastic_slots_usable(&s), 1);
    TH_EQ(elastic_slots_choose(&s), -1);
    TH_EQ(elastic_slots_in_world(&s), 2);
    elastic_slots_release(&s);
}

static void nodes_down_and_back(void)
{
    struct elastic_spec sp;
    struct elastic_slots s;
    char err[256];
    const char *const names[] = {"trnode1", "trnode2", "trnode3", "trnode4"};
    TH_EQ_ST(elastic_spec_parse("2n:3n", &sp, err, sizeof err), TR_OK);
    TH_EQ_ST_REQ(elastic_slots_init(&s, 4, names, 2, &sp, 2, err, sizeof err), TR_OK);
    TH_EQ(elastic_slots_choose(&s), 3); /* MAX 3 of the 4 nodes */
    TH_EQ(elastic_slots_of_rank(&s, 5), 2);
    TH_EQ(elastic_slots_of_rank(&s, 6), -1);
    TH_EQ(elastic_slots_find(&s, "trnode3"), 2);
    TH_EQ(elastic_slots_find(&s, "trnode3.cluster.example"), 2);
    TH_EQ(elastic_slots_find(&s, "trnode"), -1);
    TH_EQ(elastic_slots_find(&s, NULL), -1);
    /* a lost node that answers is usable at once; one that does not is down */
    elastic_slots_lost(&s, 0, 10);
    elastic_slots_answer(&s, 0, 1, 10);
    TH_EQ(s.v[0].state, ELASTIC_IN);
    elastic_slots_lost(&s, 1, 20);
    elastic_slots_answer(&s, 1, 0, 20);
    TH_CHECK(s.v[1].state == ELASTIC_DOWN && s.v[1].was_down);
    TH_EQ(elastic_slots_choose(&s), 3); /* trnode1, 3, 4 */
    TH_CHECK(!elastic_slots_can_grow(&s)); /* at MAX already */
    elastic_slots_answer(&s, 1, 1, 30);
    TH_EQ(s.v[1].state, ELASTIC_IN);
    TH_EQ(elastic_slots_ready(&s, 1000, 0), 0); /* (a node comes back by answering) */
    /* a second death: left out, whatever it answers */
    TH_EQ(elastic_slots_lost(&s, 0, 40), ELASTIC_OUT);
    elastic_slots_answer(&s, 0, 1, 40);
    TH_EQ(s.v[0].state, ELASTIC_OUT);
    TH_EQ(elastic_slots_choose(&s), 3);
    TH_CHECK(!s.v[0].used && s.v[1].used && s.v[2].used && s.v[3].used);
    elastic_slots_release(&s);
}

static const struct th_case cases[] = {
    {"spec_forms", spec_forms},
    {"spec_in_slots", spec_in_slots},
    {"lost_rests_and_comes_back", lost_rests_and_comes_back},
    {"nodes_down_and_back", nodes_down_and_back},
};

int main(int argc, char **argv)
{
    return th_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
