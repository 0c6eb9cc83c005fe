"""`plan --trial`: run the planner's top candidates for real (short `accelerate launch train.py` runs), keep the one
that measured fastest, and record every measurement in a calibration file that later `plan` calls use."""
