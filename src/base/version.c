#include "base/version.h"

#include "sb_build_version.h" /* build/gen/, written by scripts/gen_version.sh */

const char sb_version[] = SB_VERSION;
const char sb_commit[] = SB_COMMIT;
