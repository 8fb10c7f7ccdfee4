"""The rank side: the events a rank sends, its step anatomy and timing, the run spec."""
