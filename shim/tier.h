/* The host tier's mover (shim/tier.c): moves host-tier memory back to the
 * device when it has room. */
#ifndef PT_SHIM_TIER_H
#define PT_SHIM_TIER_H

/* A pooled free left the host tier holding memory: look for room soon. */
void pt_tier_kick(void);
void pt_tier_atfork_child(void);

#endif
