2





















B





















>

mondayBx