/*
 * shm_shrink_test.c — a tenant that shrinks its shared-memory segment under
 * the daemon, on cpu and on cpu-isolated (the cases are in
 * tests/support/shm_shrink.c): every copy past the segment's new end is
 * BUFFER_MISMATCH naming the field, and neither the daemon nor the device
 * worker nor another tenant notices.
 */
#include <criterion/criterion.h>

#include "../support/shm_shrink.h"

TestSuite(shm_shrink, .timeout = 120);

Test(shm_shrink, buffer_write_from_a_segment_cut_to_nothing_cpu)
{
    shrink_buffer_write("cpu");
}

Test(shm_shrink, buffer_write_from_a_segment_cut_to_nothing_cpu_isolated)
{
    shrink_buffer_write("cpu-isolated");
}

Test(shm_shrink, buffer_read_into_a_segment_cut_to_nothing_cpu)
{
    shrink_buffer_read("cpu");
}

Test(shm_shrink, buffer_read_into_a_segment_cut_to_nothing_cpu_isolated)
{
    shrink_buffer_read("cpu-isolated");
}

Test(shm_shrink, run_input_in_a_segment_cut_to_nothing_cpu)
{
    shrink_run_input("cpu");
}

Test(shm_shrink, run_input_in_a_segment_cut_to_nothing_cpu_isolated)
{
    shrink_run_input("cpu-isolated");
}

Test(shm_shrink, run_output_into_a_segment_cut_to_nothing_cpu)
{
    shrink_run_output("cpu");
}

Test(shm_shrink, run_output_into_a_segment_cut_to_nothing_cpu_isolated)
{
    shrink_run_output("cpu-isolated");
}

Test(shm_shrink, copies_racing_a_shrinking_segment_cpu)
{
    shrink_race("cpu", true);
}

Test(shm_shrink, copies_racing_a_shrinking_segment_cpu_isolated)
{
    shrink_race("cpu-isolated", true);
}
