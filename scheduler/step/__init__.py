"""What one step is made of: its plan (the prefills, the chunks and the decodes,
with the features that predict its cost), how its prefills are chosen and cut
into passes, and the decode batch kept from step to step."""
