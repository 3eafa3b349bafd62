"""Item-level metric DP on the user side: finite metric spaces and exact d_EM
(:mod:`.spaces`), the randomizers (:mod:`.mechanisms`), and the package's one exact
optimal-transport solver (:mod:`.transport`)."""
